// A TCP proxy to 127.0.0.1:<targetPort> that holds back the server's replies by a delay, in order.
// It runs in a process of its own, so that a stalled test process does not stall the network: a
// command the test process wrote reaches Redis at once, and its reply waits in the test's socket.
//
// argv: <targetPort> <replyDelayMs> [watch]
// stdout: {"port": n} once listening; {"forwarded": count} after each client→server chunk holding
// `watch` was passed on; {"replyDelay": ms} after a "delay <ms>" line on stdin changed the delay;
// {"reset": true} after a "reset" line dropped every connection.
import { createConnection, createServer } from 'node:net';
import { createInterface } from 'node:readline';

const [targetPort, initialDelay, watch = ''] = process.argv.slice(2);
let replyDelay = Number(initialDelay);
let forwarded = 0;
const report = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** Every open pair of sockets, to cut them all at once (`reset`). */
const connections = new Set();

const server = createServer((client) => {
  const upstream = createConnection(Number(targetPort), '127.0.0.1');
  connections.add({ client, upstream });
  /** Replies on their way back, each with the `performance.now()` at which it may go. */
  const queue = [];
  let timer;
  const pump = () => {
    timer = undefined;
    while (queue.length > 0 && queue[0].at <= performance.now()) client.write(queue.shift().chunk);
    if (queue.length > 0) timer = setTimeout(pump, Math.max(1, queue[0].at - performance.now()));
  };
  upstream.on('data', (chunk) => {
    // Never before a reply that came earlier: the byte stream stays in order when the delay shrinks.
    queue.push({ chunk, at: Math.max(queue.at(-1)?.at ?? 0, performance.now() + replyDelay) });
    if (timer === undefined) pump();
  });
  client.on('data', (chunk) => {
    upstream.write(chunk);
    if (watch !== '' && chunk.includes(watch)) report({ forwarded: ++forwarded });
  });
  const end = () => {
    clearTimeout(timer);
    client.destroy();
    upstream.destroy();
  };
  for (const socket of [client, upstream]) {
    socket.on('error', end);
    socket.on('close', end);
  }
});

server.listen(0, '127.0.0.1', () => report({ port: server.address().port }));

const commands = createInterface({ input: process.stdin });
commands.on('line', (line) => {
  const [command, value] = line.trim().split(' ');
  if (command === 'delay') {
    replyDelay = Number(value);
    report({ replyDelay });
  }
  if (command === 'reset') {
    // The connections drop (a TCP reset) with the replies held back still unsent; new ones are welcome.
    for (const { client, upstream } of connections) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    connections.clear();
    report({ reset: true });
  }
});
// The test process is gone (or done with us): so are we.
commands.on('close', () => process.exit(0));
