/**
 * Paces the passes of a loop that wake-ups start: a few back to back, then one per `gapMs`
 * however often it is woken (the generic cell rate algorithm: a virtual schedule of passes one
 * gap apart, which passes may run ahead of by `burst - 1` gaps).
 *
 * Why a burst: a pass woken after a quiet spell should run at once (a chain of quick tasks on an
 * idle scheduler goes from an upstream's end to its downstream running in 10 ms); a storm of
 * wake-ups (a thousand tasks finishing, each pushing the scheduler) is served by one pass per
 * gap instead of passes back to back, each reading every run under way.
 */
export class PassPacer {
  /** When the next pass would be due if passes ran one gap apart (performance.now() time). */
  #theoreticalAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: { readonly burst: number; readonly gapMs: number }) {}

  /** Records a pass starting now. */
  passStarted(now = performance.now()): void {
    this.#theoreticalAt = Math.max(this.#theoreticalAt, now) + this.options.gapMs;
  }

  /** How long from `now` the next pass must wait, however soon it is woken (0: it may start at once). */
  floorMs(now = performance.now()): number {
    return Math.max(0, this.#theoreticalAt - (this.options.burst - 1) * this.options.gapMs - now);
  }
}
