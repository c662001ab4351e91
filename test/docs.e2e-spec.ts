import { describe, expect, it } from '@jest/globals';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = fileURLToPath(new URL('..', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The bodies of the README's ```ts blocks. */
function typescriptBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map(([, body]) => body);
}

/**
 * Type-checks each snippet as a module of a user's application: the repository's compiler
 * options plus `exactOptionalPropertyTypes`, against the built declarations of the package
 * (what the tarball ships) and the packages the snippets import.
 */
function compileSnippets(snippets: string[]): string[] {
  const { options } = ts.parseJsonConfigFileContent(
    JSON.parse(readFileSync(join(root, 'tsconfig.json'), 'utf8')),
    ts.sys,
    root,
  );
  const compilerOptions: ts.CompilerOptions = {
    ...options,
    strict: true,
    exactOptionalPropertyTypes: true,
    noEmit: true,
    paths: {
      'nest-lock': ['./libs/lock/dist/index.d.ts'],
      'nest-lock/terminus': ['./libs/lock/dist/terminus/index.d.ts'],
    },
  };
  const files = new Map(snippets.map((text, index) => [join(root, `readme-snippet-${index + 1}.ts`), text]));
  const base = ts.createCompilerHost(compilerOptions);
  const host: ts.CompilerHost = {
    ...base,
    fileExists: (name) => files.has(name) || base.fileExists(name),
    readFile: (name) => files.get(name) ?? base.readFile(name),
    getSourceFile: (name, language, ...rest) =>
      files.has(name)
        ? ts.createSourceFile(name, files.get(name)!, language)
        : base.getSourceFile(name, language, ...rest),
  };

  const program = ts.createProgram([...files.keys()], compilerOptions, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((diagnostic) => diagnostic.file === undefined || files.has(diagnostic.file.fileName))
    .map((diagnostic) => {
      const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      if (!diagnostic.file || diagnostic.start === undefined) return message;
      const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
      return `${relative(root, diagnostic.file.fileName)}:${line + 1}: ${message}`;
    });
}

/** The targets of the inline links and link definitions of a markdown text, code left out. */
function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/^```[\s\S]*?^```$/gm, '').replace(/`[^`\n]*`/g, '');
  const inline = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map(([, target]) => target);
  const definitions = [...prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map(([, target]) => target);
  return [...inline, ...definitions];
}

describe("the README's TypeScript examples", () => {
  const snippets = typescriptBlocks(readme);

  it('compile under strict and exactOptionalPropertyTypes against the package', () => {
    expect(snippets.length).toBeGreaterThanOrEqual(4);
    expect(compileSnippets(snippets)).toEqual([]);
  }, 60_000);

  it('are checked for real: a wrong option is reported', () => {
    const wrong = `import { LockModule } from 'nest-lock';\nLockModule.forRoot({ redis: 42 });\n`;
    expect(compileSnippets([wrong])).toEqual([expect.stringMatching(/^readme-snippet-1\.ts:2: Type 'number'/)]);
  }, 60_000);
});

describe('links in the README and docs/', () => {
  const documents = ['README.md', ...readdirSync(join(root, 'docs')).map((name) => `docs/${name}`)].filter((path) =>
    path.endsWith('.md'),
  );

  it.each(documents)('%s links only to files inside the repository', (document) => {
    const targets = linkTargets(readFileSync(join(root, document), 'utf8'));
    const relativeTargets = targets.filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target) && !target.startsWith('#'));
    const broken = relativeTargets.filter((target) => {
      const file = resolve(root, dirname(document), decodeURI(target.split('#')[0]));
      return relative(root, file).startsWith('..') || !existsSync(file);
    });
    expect(broken).toEqual([]);
  });

  it('finds links the way a reader does: one outside the repository is caught', () => {
    expect(linkTargets('See [the contract](../shared/spec/API.md "API") and `[not](a-link)`.')).toEqual([
      '../shared/spec/API.md',
    ]);
  });
});
