// `node --import ./test/support/without-opentelemetry.mjs …`: resolving any @opentelemetry package
// fails as it does in an application that does not have it installed.
import { register } from 'node:module';

const hooks = `
export async function resolve(specifier, context, nextResolve) {
  if (specifier.startsWith('@opentelemetry/')) {
    const error = new Error("Cannot find package '" + specifier + "'");
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return nextResolve(specifier, context);
}
`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
