import { existsSync } from 'node:fs';

/** Where Debian's `chromium` package puts the browser. */
const DEBIAN_CHROMIUM = '/usr/bin/chromium';

/** Keep the browser off the (closed) network. */
const OFFLINE_ARGS = [
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
/** As root an installed Chromium needs --no-sandbox; the bundled one brings its own flags. */
const INSTALLED_ARGS = ['--no-sandbox', '--disable-gpu', ...OFFLINE_ARGS];

export interface ChromiumLaunch {
  executablePath: string;
  args: string[];
}

/**
 * The Chromium the browser tests drive: `CHROMIUM_PATH` when set, else Debian's when it is
 * installed, else the headless Chromium that the devDependency @sparticuz/chromium ships (unpacked
 * into the temp folder on first use), so that `npm ci && npm test` needs no browser on the machine.
 */
export async function findChromium(): Promise<ChromiumLaunch> {
  const chosen = process.env.CHROMIUM_PATH || undefined;
  if (chosen !== undefined && !existsSync(chosen)) {
    throw new Error(
      `CHROMIUM_PATH is ${chosen}, which does not exist: unset it to use Debian's or the bundled Chromium`,
    );
  }
  const installed = chosen ?? (existsSync(DEBIAN_CHROMIUM) ? DEBIAN_CHROMIUM : undefined);
  if (installed !== undefined) return { executablePath: installed, args: INSTALLED_ARGS };

  const { default: bundled } = await import('@sparticuz/chromium');
  return { executablePath: await bundled.executablePath(), args: [...bundled.args, ...OFFLINE_ARGS] };
}
