// Results are written as Prettier would format them, so that `npm run lint` (prettier --check .)
// passes on a work tree that holds them and a diff between two runs shows numbers, not layout.
import { writeFileSync } from 'node:fs';
import * as prettier from 'prettier';

export async function writeFormatted(path, text) {
  const options = (await prettier.resolveConfig(path)) ?? {};
  const info = await prettier.getFileInfo(path);
  const formatted = info.inferredParser ? await prettier.format(text, { ...options, filepath: path }) : text;
  writeFileSync(path, formatted);
}
