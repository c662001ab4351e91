// Campaigns for a name until killed, and prints one JSON line per change of leadership:
// {"event":"elected","term":7,"at":<Date.now()>} / {"event":"revoked","term":7,"reason":"expired","at":…}.
// SIGTERM closes the application (which resigns: the next leader is woken at once), prints
// {"event":"closed"} and exits.
//
// usage: node campaign.mjs <redisUrl> <name> <ttl>
import { startWorkerApp } from './worker-app.mjs';

const [url, name, ttl] = process.argv.slice(2);
const app = await startWorkerApp(url);
const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, pid: process.pid, at: Date.now() })}\n`);
let term;
app.leaders.campaign(name, {
  ttl: Number(ttl),
  onElected: (elected) => print({ event: 'elected', term: (term = elected) }),
  onRevoked: (reason) => print({ event: 'revoked', term, reason: reason.reason }),
});
process.once('SIGTERM', () => {
  void app.close().then(() => {
    print({ event: 'closed' });
    process.exit(0);
  });
});
print({ event: 'ready' });
