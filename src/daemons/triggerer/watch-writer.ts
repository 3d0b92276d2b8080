import type { Logger } from 'pino';
import { describeThrown } from '../../vocabulary/errors.ts';
import type { Stores, WatchBatch, WatchBatchResult } from '../../storage/index.ts';
import type { WatchSink } from './trigger-runner.ts';

/** The first pause before writing a watcher's batch again after a failed write (ms); it doubles, up to MAX. */
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;

/**
 * Writes watchers' batches for the triggerer: each batch's runs and cursor in one transaction
 * (recordWatchEvents), the watcher waiting on the promise (its yield returns once written, so it
 * acknowledges its source after the commit). A failed write (the database away) is tried again
 * with a backoff for as long as the triggerer runs: a batch is never dropped, and its watcher reads
 * nothing more meanwhile. Batches of different watchers are written independently.
 */
export class WatchWriter implements WatchSink {
  #stopped = false;

  constructor(
    private readonly storage: Pick<Stores, 'triggers'>,
    private readonly log: Logger,
    /** This triggerer's job id, once registered: a batch is written only while it owns the watcher. */
    private readonly ownerJobId: () => number | null,
    /** Told once a batch made runs: schedulers have work. */
    private readonly onRuns: () => void,
  ) {}

  async write(batch: WatchBatch): Promise<WatchBatchResult> {
    for (let failures = 0; ; failures++) {
      const owner = this.ownerJobId();
      if (owner === null || this.#stopped) return { kind: 'lost' };
      try {
        const result = await this.storage.triggers.recordWatchEvents(batch, owner);
        if (result.kind === 'written' && result.runs > 0) this.onRuns();
        return result;
      } catch (error) {
        const waitMs = Math.min(RETRY_FIRST_MS * 2 ** failures, RETRY_MAX_MS);
        this.log.warn(
          { trigger_id: batch.triggerId, events: batch.events.length, error: describeThrown(error).error, retry_in_ms: waitMs },
          `watcher ${batch.triggerId}: writing ${batch.events.length} event(s) failed; trying again in ${waitMs} ms`,
        );
        await new Promise((resolve) => setTimeout(resolve, waitMs).unref());
      }
    }
  }

  /** The triggerer is stopping: batches not yet written are not tried again (their watchers are handed over with their cursors). */
  stop(): void {
    this.#stopped = true;
  }
}
