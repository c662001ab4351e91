import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { isBuilt } from './built.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Type-checks each snippet as a module of a user's application — the repository's compiler options
 * with `strict` and `exactOptionalPropertyTypes` — against the built declarations of the package
 * (what the tarball ships; `useBuilt('library')` in the calling describe block builds them). Returns the
 * diagnostics of the snippets, as `snippet-<n>.ts:<line>: <message>`.
 */
export function compileSnippets(snippets: readonly string[]): string[] {
  if (!isBuilt('library')) throw new Error("compileSnippets reads libs/lock/dist: call useBuilt('library') first");
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
  const files = new Map(snippets.map((text, index) => [join(root, `snippet-${index + 1}.ts`), text]));
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
