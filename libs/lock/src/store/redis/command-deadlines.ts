/** One command in flight: when it is due, and what its expiry does. */
export interface InFlight {
  readonly deadline: number;
  expire(): void;
}

/**
 * Bounds every command in flight by the same timeout with one timer for all of them rather than
 * one each: commands are bounded in the order they were sent, so their deadlines come in that
 * order too, and the timer only ever waits for the oldest.
 */
export class CommandDeadlines {
  private readonly inFlight = new Set<InFlight>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly timeout: number) {}

  /** How many commands are waiting for their answer. */
  get pending(): number {
    return this.inFlight.size;
  }

  /** A command is sent now: `expire` runs if it has not `settled` within the timeout. */
  sent(expire: () => void): InFlight {
    const command = { deadline: performance.now() + this.timeout, expire };
    this.inFlight.add(command);
    // unref: a command in flight holds its socket, which keeps the process alive anyway.
    this.timer ??= setTimeout(() => this.expireDue(), this.timeout).unref();
    return command;
  }

  /** Its answer (or failure) came: it is no longer bounded. `false` when it expired first. */
  settled(command: InFlight): boolean {
    return this.inFlight.delete(command);
  }

  private expireDue(): void {
    this.timer = undefined;
    const now = performance.now();
    for (const command of this.inFlight) {
      if (command.deadline > now) {
        this.timer = setTimeout(() => this.expireDue(), command.deadline - now).unref();
        return;
      }
      this.inFlight.delete(command);
      command.expire();
    }
  }
}
