/**
 * The names of an options interface, taken from the interface itself: each interface has a key
 * object (`true` per key) that the compiler holds to exactly the interface's keys, and the checks
 * of unknown names read their names from it. A field added to an interface fails the build until
 * its key object names it; a name the interface lacks fails it too.
 */

/** One `true` per key of the options interface `T`, optional keys included. */
export type OptionKeys<T> = { readonly [K in keyof T]-?: true };

/**
 * The type an extra key of a key object must have, which `true` is not: the compiler's error then
 * names the fault and the interface (`… is not assignable to type 'true & NotAKeyOf<LockOptions>'`).
 * An object type, so that the intersection with `true` is not reduced to `never`.
 */
interface NotAKeyOf<T> {
  readonly 'is not a key of': T;
}

/**
 * The key object of the options interface `T`: `keysOf<LockOptions>()({ ttl: true, … })`. It must
 * name every key of `T` (a missing one is a compile error) and nothing else (an extra one is a
 * compile error too, even one brought in by a spread, which `satisfies` lets through).
 */
export function keysOf<T extends object>() {
  return <const Keys extends OptionKeys<T>>(
    keys: Keys & { readonly [Extra in Exclude<keyof Keys, keyof T>]: NotAKeyOf<T> },
  ): Keys => keys;
}

/** The names of a key object, in its order: what `rejectUnknownNames` knows. */
export function optionNames(keys: Readonly<Record<string, true>>): ReadonlySet<string> {
  return new Set(Object.keys(keys));
}
