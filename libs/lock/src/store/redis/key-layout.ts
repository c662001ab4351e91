import { createHash } from 'node:crypto';

/**
 * How a user's key (or semaphore name) becomes the hash tag of its Redis keys, on one Redis and on
 * every Redlock master alike. The key itself is the tag, `{<key>}`, so that every Redis key of one
 * lock lives in one cluster slot — except:
 *
 * - a key holding `{` or `}`, which could end the tag early or make it empty (`}abc`): the tag is a
 *   digest of the key, followed by the key itself, `{<digest>}<key>`, so that distinct keys still
 *   never share a Redis key;
 * - a key longer than `LONGEST_KEY_BYTES` (UTF-8): `{<digest>}#<its first 32 characters, braces
 *   dropped>`, so that no Redis key name is long, whatever the user's key (a template fed by request
 *   input must not grow Redis by its length). The `#` keeps this form apart from the two above: a
 *   plain tag has nothing but a `:suffix` after its `}`, a braced key has a brace after it.
 *
 * The digest is the first 32 hex digits (128 bits) of SHA-256.
 */
const LONGEST_KEY_BYTES = 200;

/** Characters of a long key kept readable after its digest. */
const LONG_KEY_HEAD = 32;

export function hashTagged(id: string): string {
  // Up to 66 UTF-16 units fit in 200 bytes of UTF-8 whatever they are: most keys skip the count.
  const long = id.length > LONGEST_KEY_BYTES / 3 && Buffer.byteLength(id) > LONGEST_KEY_BYTES;
  if (long) return `{${digestOf(id)}}#${Array.from(id.replace(/[{}]/g, '')).slice(0, LONG_KEY_HEAD).join('')}`;
  return /[{}]/.test(id) ? `{${digestOf(id)}}${id}` : `{${id}}`;
}

function digestOf(id: string): string {
  return createHash('sha256').update(id).digest('hex').slice(0, 32);
}

/** `PX` takes whole milliseconds; rounding up never shortens a lease. */
export function toMillis(ttl: number): number {
  return Math.ceil(ttl);
}

/**
 * The Redis Cluster hash slot of every Redis key of the lease `id` (CRC16 of its hash tag, modulo
 * 16384): the order in which several keys are taken goes by it first, so that the keys of one slot
 * come together.
 */
export function slotOf(id: string): number {
  const tagged = hashTagged(id);
  return crc16(Buffer.from(tagged.slice(1, tagged.indexOf('}')))) % 16_384;
}

/** CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with. */
function crc16(bytes: Buffer): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/**
 * The order several leases are taken in on Redis — by hash slot, then by key, the same on one server and
 * on a Cluster — cut into runs that one step takes together: all of them on one server, the keys of
 * one slot on a Cluster (the order keeps them side by side).
 */
export function slotOrder(ids: readonly string[], cluster: boolean): string[][] {
  const slots = new Map(ids.map((id) => [id, slotOf(id)]));
  const ordered = [...ids].sort((a, b) => slots.get(a)! - slots.get(b)! || (a < b ? -1 : a > b ? 1 : 0));
  if (!cluster) return [ordered];
  const runs: string[][] = [];
  for (const id of ordered) {
    const run = runs.at(-1);
    if (run !== undefined && slots.get(run[0]) === slots.get(id)) run.push(id);
    else runs.push([id]);
  }
  return runs;
}
