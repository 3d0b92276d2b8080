import { performance } from 'node:perf_hooks';

export interface SlowStepReport<Subject> {
  readonly subject: Subject;
  readonly blockedMs: number;
}

/**
 * Names the trigger that blocked the event loop. All JavaScript here runs one slice at a time,
 * and the runner sees the edges of every trigger's slices: it calls `mark()` when a slice of
 * someone else's code ends (a resume is about to start, a database call returned) and
 * `checkpoint(trigger)` when a trigger's slice ends (it yielded, slept, or its resumed
 * continuation ran). A checkpoint long after the last edge means that trigger's slice blocked.
 *
 * A ticker marks the loop every few ms while it is idle, and reports a block no checkpoint
 * explained (code that blocked, then awaited something the runner does not see) without a name.
 */
export class LoopWatch<Subject> {
  #lastEdge = performance.now();
  #lastTick = performance.now();
  #explainedSinceTick = false;
  #checkpointsSinceTick = 0;
  #ticker: NodeJS.Timeout | null = null;
  readonly #thresholdMs: number;
  readonly #tickMs: number;

  constructor(
    thresholdMs: number,
    private readonly onSlowStep: (report: SlowStepReport<Subject>) => void,
    /** `stepsInBetween`: trigger slices that ended during the block (many: the loop was busy, not stuck). */
    private readonly onUnexplainedBlock: (blockedMs: number, stepsInBetween: number) => void,
  ) {
    this.#thresholdMs = thresholdMs;
    this.#tickMs = Math.max(5, Math.min(50, Math.floor(thresholdMs / 4)));
  }

  start(): void {
    this.#lastTick = this.#lastEdge = performance.now();
    this.#ticker = setInterval(() => this.#tick(), this.#tickMs);
    this.#ticker.unref();
  }

  stop(): void {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
  }

  mark(): void {
    this.#lastEdge = performance.now();
  }

  checkpoint(subject: Subject): void {
    const now = performance.now();
    const blockedMs = now - this.#lastEdge;
    this.#lastEdge = now;
    this.#checkpointsSinceTick++;
    if (blockedMs > this.#thresholdMs) {
      this.#explainedSinceTick = true;
      this.onSlowStep({ subject, blockedMs });
    }
  }

  #tick(): void {
    const now = performance.now();
    const lateMs = now - this.#lastTick - this.#tickMs;
    if (lateMs > this.#thresholdMs && !this.#explainedSinceTick) this.onUnexplainedBlock(lateMs, this.#checkpointsSinceTick);
    this.#explainedSinceTick = false;
    this.#checkpointsSinceTick = 0;
    this.#lastTick = now;
    this.#lastEdge = now;
  }
}
