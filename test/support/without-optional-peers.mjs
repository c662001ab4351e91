// `node --import ./test/support/without-optional-peers.mjs …`: resolving nest-lock's optional peers
// (any @opentelemetry package, @nestjs/terminus) fails as in an application that does not have them.
import { register } from 'node:module';

const hooks = `
export async function resolve(specifier, context, nextResolve) {
  if (specifier.startsWith('@opentelemetry/') || specifier === '@nestjs/terminus') {
    const error = new Error("Cannot find package '" + specifier + "'");
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return nextResolve(specifier, context);
}
`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
