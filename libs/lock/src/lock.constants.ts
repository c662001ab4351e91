/** Injection token of the validated module options, every default filled in (`ResolvedModuleOptions`). */
export const LOCK_OPTIONS = Symbol('LOCK_OPTIONS');
