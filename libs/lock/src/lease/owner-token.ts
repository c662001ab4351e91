import { randomFillSync } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time: one call into the CSPRNG per 256 tokens instead of one each. */
const tokenPool = Buffer.alloc(4096);
let tokenPoolOffset = tokenPool.length;

/** 128 random bits, fresh for every acquisition, so that no two owners ever share a token. */
export function createOwnerToken(): string {
  if (tokenPoolOffset === tokenPool.length) {
    randomFillSync(tokenPool);
    tokenPoolOffset = 0;
  }
  tokenPoolOffset += 16;
  return tokenPool.toString('base64url', tokenPoolOffset - 16, tokenPoolOffset);
}
