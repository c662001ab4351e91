interface Turn {
  /** Gives the turn to this waiter. */
  start(): void;
}

/**
 * The fair waiters of one process, per lock or semaphore, in order of arrival: only the first of
 * each line waits on the store (and in the store's own line, across processes); the others wait
 * here, without a timer or a round trip each, until the one before them is done waiting.
 */
export class LocalLines {
  /** Line key → the waiters after the one whose turn it is. */
  private readonly lines = new Map<string, Turn[]>();

  /** Whether a waiter of this process holds the turn of `line` now (a newcomer would queue). */
  isBusy(line: string): boolean {
    return this.lines.has(line);
  }

  /**
   * Resolves with `leave` once it is the caller's turn (at once when nobody of this process waits),
   * or with `null` when `deadline` (`performance.now()`) passes first. Rejects on abort. The caller
   * must call `leave()` when it stops waiting, won or not, so that the next one gets its turn.
   */
  enter(line: string, deadline: number, signal?: AbortSignal): Promise<(() => void) | null> {
    const waiting = this.lines.get(line);
    if (waiting === undefined) {
      this.lines.set(line, []);
      return Promise.resolve(this.leaver(line));
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        dropOut();
        reject(signal!.reason);
      };
      const turn: Turn = {
        start: () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          resolve(this.leaver(line));
        },
      };
      const dropOut = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const index = waiting.indexOf(turn);
        if (index >= 0) waiting.splice(index, 1);
      };
      const timer = setTimeout(
        () => {
          dropOut();
          resolve(null);
        },
        Math.max(0, deadline - performance.now()),
      );
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      waiting.push(turn);
    });
  }

  private leaver(line: string): () => void {
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const next = this.lines.get(line)?.shift();
      if (next) next.start();
      else this.lines.delete(line);
    };
  }
}
