import type { Logger } from 'pino';
import type { Stores } from '../../storage/index.ts';
import { describeThrown } from '../../vocabulary/errors.ts';
import type { Clock } from '../../vocabulary/time/clock.ts';

/*
 * The figures a daemon records of itself every sample interval, for the status page's charts
 * (a deployment without Prometheus still sees the last hours). Each is a number; a name ending
 * in `_total` is a running total in the process, recorded as what it grew by since the last
 * sample (so a chart reads events per interval, whatever the process's age). `interval_ms` is
 * the time the sample covers. One row per daemon per interval: at a minute, 1,440 a day each;
 * a writer deletes every daemon's rows older than SAMPLE_RETENTION_MS at one sample in
 * PRUNE_EVERY, and db clean those older than its cutoff.
 */

/** How often a daemon records its figures unless told otherwise (--sample-interval). */
export const DEFAULT_SAMPLE_INTERVAL_MS = 60_000;

/** How long samples are kept by the daemons themselves. */
export const SAMPLE_RETENTION_MS = 24 * 3600_000;

/** One sample in this many also deletes the samples past SAMPLE_RETENTION_MS. */
const PRUNE_EVERY = 10;

/** Reads a daemon's figures now: gauges as they are, `_total` counters as running totals. */
export type FigureReader = () => Promise<Record<string, number>> | Record<string, number>;

/** Records one daemon's figures every `intervalMs` until stopped; a failed write is logged and the next interval tries again. */
export class DaemonSampler {
  #timer: NodeJS.Timeout | null = null;
  #lastTotals = new Map<string, number>();
  #lastAt: number;
  #written = 0;
  #writing: Promise<void> | null = null;

  constructor(
    private readonly storage: Pick<Stores, 'jobs'>,
    private readonly job: { readonly id: number; readonly jobType: string },
    private readonly intervalMs: number,
    private readonly read: FigureReader,
    private readonly log: Logger,
    private readonly clock: Clock,
  ) {
    this.#lastAt = clock.now();
  }

  start(): void {
    if (this.intervalMs <= 0 || this.#timer !== null) return;
    // The first sample after one interval: its deltas then cover a whole one.
    this.#timer = setInterval(() => {
      this.#writing ??= this.sampleNow().finally(() => {
        this.#writing = null;
      });
    }, this.intervalMs);
    this.#timer.unref();
  }

  /** Stops sampling, after a write in flight. */
  async stop(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.#writing;
  }

  /** Reads and records one sample now. */
  async sampleNow(): Promise<void> {
    const now = this.clock.now();
    try {
      const read = await this.read();
      const figures: Record<string, number> = { interval_ms: now - this.#lastAt };
      for (const [name, value] of Object.entries(read)) {
        if (!name.endsWith('_total')) {
          figures[name] = value;
          continue;
        }
        figures[name.slice(0, -'_total'.length)] = Math.max(0, value - (this.#lastTotals.get(name) ?? 0));
        this.#lastTotals.set(name, value);
      }
      this.#lastAt = now;
      const prune = this.#written++ % PRUNE_EVERY === 0 ? now - SAMPLE_RETENTION_MS : undefined;
      await this.storage.jobs.recordDaemonSample({ jobId: this.job.id, jobType: this.job.jobType, figures }, now, prune);
    } catch (error) {
      this.log.warn(
        { error: describeThrown(error).error, job_id: this.job.id },
        `recording this daemon's figures for the charts failed: ${describeThrown(error).error}`,
      );
    }
  }
}
