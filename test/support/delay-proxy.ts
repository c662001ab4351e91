import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** What the proxy process prints, one JSON object a line. */
interface ProxyLine {
  port?: number;
  forwarded?: number;
  replyDelay?: number;
  reset?: boolean;
}

/**
 * A TCP proxy to a local Redis, in a process of its own (`workers/delay-proxy.mjs`), that holds back
 * the server's replies by `replyDelay` ms, in order. Commands pass at once: Redis applies them on
 * time, and only their answers arrive late — a slow network back, or a client that reads late.
 */
export class DelayProxy {
  private readonly forwardedListeners = new Set<(count: number) => void>();
  private readonly acks: (() => void)[] = [];
  private forwardedCount = 0;

  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
  ) {}

  /**
   * Starts the proxy to `127.0.0.1:targetPort`. With `watch`, every command chunk that holds that text
   * is reported to `onForwarded` listeners right after it was passed on to Redis.
   */
  static async start(targetPort: number, { replyDelay = 0, watch = '' } = {}): Promise<DelayProxy> {
    const script = fileURLToPath(new URL('./workers/delay-proxy.mjs', import.meta.url));
    const child = spawn(process.execPath, [script, String(targetPort), String(replyDelay), watch], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    // A delay change sent after the proxy was stopped (a test that failed half-way) is of no consequence.
    child.stdin.on('error', () => undefined);
    const lines = createInterface({ input: child.stdout });
    const exited = once(child, 'exit').then(([code]) => {
      throw new Error(`the delay proxy exited with code ${code} before listening`);
    });
    exited.catch(() => undefined);
    const [first] = (await Promise.race([once(lines, 'line'), exited])) as [string];
    const proxy = new DelayProxy(child, (JSON.parse(first) as ProxyLine).port!);
    lines.on('line', (line) => proxy.receive(JSON.parse(line) as ProxyLine));
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Command chunks holding the watched text passed on so far. */
  get forwarded(): number {
    return this.forwardedCount;
  }

  /** Called in the I/O phase in which the report arrives: a listener that blocks stalls the event loop there. */
  onForwarded(listener: (count: number) => void): void {
    this.forwardedListeners.add(listener);
  }

  /** Replies that arrive from now on wait `ms` (never overtaking earlier ones). */
  async setReplyDelay(ms: number): Promise<void> {
    await this.tell(`delay ${ms}`);
  }

  /** Drops every connection (a TCP reset), with the replies held back unsent; clients may connect again. */
  async resetConnections(): Promise<void> {
    await this.tell('reset');
  }

  private async tell(command: string): Promise<void> {
    const acknowledged = new Promise<void>((resolve) => this.acks.push(resolve));
    this.child.stdin!.write(`${command}\n`);
    await acknowledged;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGKILL');
    await exited;
  }

  private receive(line: ProxyLine): void {
    if (line.forwarded !== undefined) {
      this.forwardedCount = line.forwarded;
      for (const listener of this.forwardedListeners) listener(line.forwarded);
    }
    if (line.replyDelay !== undefined || line.reset) this.acks.shift()?.();
  }
}
