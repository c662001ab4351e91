// What Redis itself counts: commands run, by name (the commands a script runs included), and CPU.

/** A snapshot from `INFO commandstats` and `INFO cpu`, through a client the bench does not count. */
export async function serverSnapshot(admin) {
  const [stats, cpu] = await Promise.all([admin.info('commandstats'), admin.info('cpu')]);
  const commands = {};
  for (const [, name, calls] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) commands[name] = Number(calls);
  const field = (name) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(cpu)?.[1] ?? 0);
  return { commands, cpuSeconds: field('used_cpu_sys') + field('used_cpu_user') };
}

/** `after - before`, by command name (INFO left out: the bench's own); CPU in seconds. */
export function serverDelta(before, after) {
  const commands = {};
  for (const [name, calls] of Object.entries(after.commands)) {
    if (name === 'info') continue;
    const delta = calls - (before.commands[name] ?? 0);
    if (delta > 0) commands[name] = delta;
  }
  return { commands, cpuSeconds: after.cpuSeconds - before.cpuSeconds };
}

/** Adds delta `b` into `a`. */
export function addDelta(a, b) {
  for (const [name, calls] of Object.entries(b.commands)) a.commands[name] = (a.commands[name] ?? 0) + calls;
  a.cpuSeconds += b.cpuSeconds;
  return a;
}
