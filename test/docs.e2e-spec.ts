import { describe, expect, it } from '@jest/globals';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { useBuilt } from './support/built.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const readme = read('README.md');

/** The guides, one per topic: each a user's next step from a section of the README. */
const guides = readdirSync(join(root, 'docs/guides'))
  .filter((name) => name.endsWith('.md'))
  .sort()
  .map((name) => `docs/guides/${name}`);

/** What a user reads: the README and the guides. Their examples compile and their prose fits a screen. */
const userDocuments = ['README.md', ...guides];

/** The bodies of a markdown text's ```ts blocks. */
function typescriptBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map(([, body]) => body);
}

/** The lines of a markdown text, numbered from 1, that are not inside a fenced code block. */
function proseLines(markdown: string): { number: number; text: string }[] {
  let inCode = false;
  const prose: { number: number; text: string }[] = [];
  markdown.split('\n').forEach((text, index) => {
    if (/^\s*```/.test(text)) inCode = !inCode;
    else if (!inCode) prose.push({ number: index + 1, text });
  });
  return prose;
}

function lineCount(markdown: string): number {
  return markdown.split('\n').length - (markdown.endsWith('\n') ? 1 : 0);
}

/** The 1-based number of the first line that matches `pattern`, or `Infinity`. */
function firstLine(markdown: string, pattern: RegExp): number {
  const index = markdown.split('\n').findIndex((line) => pattern.test(line));
  return index === -1 ? Infinity : index + 1;
}

interface Snippet {
  /** Where it comes from, for the messages: `docs/guides/locks.md, block 2`. */
  origin: string;
  text: string;
}

/**
 * Type-checks each snippet as a module of a user's application: the repository's compiler
 * options plus `exactOptionalPropertyTypes`, against the built declarations of the package
 * (what the tarball ships) and the packages the snippets import.
 */
function compileSnippets(snippets: Snippet[]): string[] {
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
  const files = new Map(snippets.map((snippet, index) => [join(root, `docs-snippet-${index + 1}.ts`), snippet]));
  const base = ts.createCompilerHost(compilerOptions);
  const host: ts.CompilerHost = {
    ...base,
    fileExists: (name) => files.has(name) || base.fileExists(name),
    readFile: (name) => files.get(name)?.text ?? base.readFile(name),
    getSourceFile: (name, language, ...rest) =>
      files.has(name)
        ? ts.createSourceFile(name, files.get(name)!.text, language)
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
      return `${files.get(diagnostic.file.fileName)!.origin}, line ${line + 1}: ${message}`;
    });
}

/** The targets of the inline links and link definitions of a markdown text, code left out. */
function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/^```[\s\S]*?^```$/gm, '').replace(/`[^`\n]*`/g, '');
  const inline = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map(([, target]) => target);
  const definitions = [...prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map(([, target]) => target);
  return [...inline, ...definitions];
}

describe('the TypeScript examples of the README and the guides', () => {
  // They compile against the built declarations (libs/lock/dist), what the tarball ships.
  useBuilt('library');
  const snippets = userDocuments.flatMap((document) =>
    typescriptBlocks(read(document)).map((text, index) => ({ origin: `${document}, block ${index + 1}`, text })),
  );

  it('are there: a quick start in the README, at least one runnable example in every guide', () => {
    expect(guides.length).toBeGreaterThanOrEqual(9);
    expect(typescriptBlocks(readme).length).toBeGreaterThanOrEqual(1);
    const withoutExample = guides.filter((guide) => typescriptBlocks(read(guide)).length === 0);
    expect(withoutExample).toEqual([]);
  });

  it('compile under strict and exactOptionalPropertyTypes against the package', () => {
    expect(compileSnippets(snippets)).toEqual([]);
  }, 120_000);

  it('are checked for real: a wrong option is reported', () => {
    const wrong = `import { LockModule } from 'nest-lock';\nLockModule.forRoot({ redis: 42 });\n`;
    expect(compileSnippets([{ origin: 'wrong.md, block 1', text: wrong }])).toEqual([
      expect.stringMatching(/^wrong\.md, block 1, line 2: Type 'number'/),
    ]);
  }, 60_000);
});

describe("the README: a user's first five minutes", () => {
  const { version } = JSON.parse(read('libs/lock/package.json')) as { version: string };

  it('is under 250 lines', () => {
    expect(lineCount(readme)).toBeLessThan(250);
  });

  it('says how to install within its first 40 lines, with the tarball `npm run pack` writes', () => {
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.pack).toMatch(/npm pack \.\/libs\/lock$/);
    expect(firstLine(readme, /^npm ci && npm run pack\b/)).toBeLessThanOrEqual(40);
    const tarball = `nest-lock-${version}.tgz`.replaceAll('.', '\\.');
    expect(firstLine(readme, new RegExp(`^npm install \\S*/${tarball} ioredis\\b`))).toBeLessThanOrEqual(40);
  });

  it('shows @WithLock within its first 80 lines', () => {
    expect(firstLine(readme, /@WithLock\(/)).toBeLessThanOrEqual(80);
  });

  it('keeps the two set-up commands of a fresh clone', () => {
    expect(firstLine(readme, /^npm ci && npm start\b/)).toBeLessThan(Infinity);
    expect(firstLine(readme, /^npm ci && npm test\b/)).toBeLessThan(Infinity);
  });

  it('links every guide', () => {
    const linked = new Set(linkTargets(readme).map((target) => target.split('#')[0]));
    expect(guides.filter((guide) => !linked.has(guide))).toEqual([]);
  });
});

describe('prose lines of the README and the guides', () => {
  it.each(userDocuments)('%s has no line over 120 characters outside code blocks', (document) => {
    const long = proseLines(read(document))
      .filter(({ text }) => [...text].length > 120)
      .map(({ number, text }) => `${document}:${number} (${[...text].length} characters)`);
    expect(long).toEqual([]);
  });

  it('are measured outside code blocks only', () => {
    const markdown = `short\n\`\`\`ts\n${'x'.repeat(130)}\n\`\`\`\n${'y'.repeat(121)}\n`;
    expect(proseLines(markdown).filter(({ text }) => text.length > 120)).toEqual([
      { number: 5, text: 'y'.repeat(121) },
    ]);
  });
});

describe('links in the README, CONTRIBUTING, CHANGELOG, docs/ and docs/guides/', () => {
  const documents = [
    'README.md',
    'CONTRIBUTING.md',
    'CHANGELOG.md',
    ...readdirSync(join(root, 'docs')).map((name) => `docs/${name}`),
    ...guides,
  ].filter((path) => path.endsWith('.md'));

  it.each(documents)('%s links only to files inside the repository', (document) => {
    const targets = linkTargets(read(document));
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
