// Counts what the lock libraries send to Redis, inside the worker process, without a proxy in the
// path (a proxy would add a hop to every round trip it counts). Every ioredis client in the
// process is counted — the ones nest-lock, redis-semaphore and redlock open or are given —
// except those marked with `exclude()` (the bench's own counter reads and writes).
//
// - `commands`: commands handed to a client (each one its own request, also inside a pipeline);
// - `writes`:   writes on a counted client's socket. ioredis writes each command alone and a
//               pipeline as one write, so this is the number of requests on the wire, our
//               estimate of round trips (commands written in the same tick travel together).
import { Redis } from 'ioredis';

export const counters = { commands: 0, writes: 0, excludedCommands: 0 };

const EXCLUDED = Symbol('bench.excluded');
const HOOKED = Symbol('bench.hooked');

/** Leaves this client out of `commands` and `writes`; its commands go to `excludedCommands`. */
export function exclude(client) {
  client[EXCLUDED] = true;
  return client;
}

const sendCommand = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function countedSendCommand(command, stream) {
  if (this[EXCLUDED]) {
    counters.excludedCommands++;
  } else {
    counters.commands++;
    hookSocket(this.stream);
  }
  return sendCommand.call(this, command, stream);
};

function hookSocket(socket) {
  if (!socket || socket[HOOKED]) return;
  socket[HOOKED] = true;
  const write = socket.write;
  socket.write = function countedWrite(...args) {
    counters.writes++;
    return write.apply(this, args);
  };
}

/** A snapshot of the counters and of this process's CPU time. */
export function sample(at) {
  const cpu = process.cpuUsage();
  return { at, ...counters, cpuMicros: cpu.user + cpu.system };
}
