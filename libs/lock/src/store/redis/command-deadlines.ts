/**
 * Bounds every command in flight by the same timeout with one timer for all of them rather than
 * one each: commands are bounded in the order they were sent, so their deadlines come in that
 * order too, and the timer only ever waits for the oldest.
 */
export class CommandDeadlines {
  private readonly inFlight = new Set<{ deadline: number; expire(): void }>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly timeout: number) {}

  /** How many commands are waiting for their answer. */
  get pending(): number {
    return this.inFlight.size;
  }

  /** `command`, or the error `timedOut()` makes if it has not settled within the timeout. */
  bound<T>(command: Promise<T>, timedOut: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry = { deadline: performance.now() + this.timeout, expire: () => reject(timedOut()) };
      this.inFlight.add(entry);
      // unref: a command in flight holds its socket, which keeps the process alive anyway.
      this.timer ??= setTimeout(() => this.expireDue(), this.timeout).unref();
      // Its late rejection after a timeout is handled here, never unhandled.
      command.then(
        (value) => {
          this.inFlight.delete(entry);
          resolve(value);
        },
        (error: unknown) => {
          this.inFlight.delete(entry);
          reject(error);
        },
      );
    });
  }

  private expireDue(): void {
    this.timer = undefined;
    const now = performance.now();
    for (const entry of this.inFlight) {
      if (entry.deadline > now) {
        this.timer = setTimeout(() => this.expireDue(), entry.deadline - now).unref();
        return;
      }
      this.inFlight.delete(entry);
      entry.expire();
    }
  }
}
