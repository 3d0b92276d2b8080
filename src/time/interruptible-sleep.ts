/**
 * The pause of a polling loop that something can cut short: a stop, or (in the worker) a slot
 * coming free. A wake while no pause is under way is kept for the next one, which then returns
 * at once: a slot freed while the loop was busy claiming is not left idle for a whole interval.
 */
export class InterruptibleSleep {
  #wake: (() => void) | null = null;
  #woken = false;

  sleep(ms: number): Promise<void> {
    if (this.#woken) {
      this.#woken = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.#wake === done) this.#wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake = done;
    });
  }

  wake(): void {
    if (this.#wake) this.#wake();
    else this.#woken = true;
  }
}
