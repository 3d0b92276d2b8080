/**
 * Sleeps that end early together: each sleeper waits up to its own time; wakeAll() ends every
 * sleep under way at once (a run changed, the database answers again). A wake with no one
 * asleep is not remembered.
 */
export class WakeSet {
  readonly #sleepers = new Set<() => void>();

  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#sleepers.add(wake);
    });
  }

  wakeAll(): void {
    for (const wake of [...this.#sleepers]) wake();
  }
}
