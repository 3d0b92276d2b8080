/**
 * The pause of a polling loop that something can cut short: a stop, or (in the worker) a slot
 * coming free. A wake while no pause is under way is kept for the next one, which then returns
 * at once: a slot freed while the loop was busy claiming is not left idle for a whole interval.
 */
export class InterruptibleSleep {
  #wake: (() => void) | null = null;
  #woken = false;

  /** `unref`: a pause under way does not keep the process alive (a watch that runs beside a daemon's own loops). */
  constructor(private readonly options: { readonly unref?: boolean } = {}) {}

  /**
   * Waits `ms`, or less if woken, but never less than `floorMs`: a wake before then ends the
   * pause at `floorMs` (a loop whose passes read a lot spaces them out however often it is woken).
   */
  sleep(ms: number, floorMs = 0): Promise<void> {
    const floor = Math.min(ms, floorMs);
    if (this.#woken) {
      this.#woken = false;
      return floor > 0 ? new Promise<void>((resolve) => this.#timer(resolve, floor)) : Promise.resolve();
    }
    const sleptFrom = performance.now();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.#wake === wake) this.#wake = null;
        resolve();
      };
      const wake = () => {
        const floorLeft = floor - (performance.now() - sleptFrom);
        if (floorLeft <= 0) return done();
        clearTimeout(timer);
        timer = this.#timer(done, floorLeft);
      };
      let timer = this.#timer(done, ms);
      this.#wake = wake;
    });
  }

  #timer(callback: () => void, ms: number): NodeJS.Timeout {
    const timer = setTimeout(callback, ms);
    if (this.options.unref) timer.unref();
    return timer;
  }

  wake(): void {
    if (this.#wake) this.#wake();
    else this.#woken = true;
  }
}
