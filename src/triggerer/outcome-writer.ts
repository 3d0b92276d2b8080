import { setTimeout as delay, setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from 'pino';
import { describeThrown } from '../errors.ts';
import type { FailureKwargs, MoveResult, Storage, TriggerEventRecord, TriggerFailureRecord } from '../storage/index.ts';

export interface OutcomeWriterOptions {
  /** Triggers per transaction: bounds how long one write holds the event loop (SQLite is synchronous). */
  readonly batchSize: number;
  readonly retryDelayMs: number;
}

/**
 * Collects what triggers produced and writes it in batches: many task instances per statement,
 * one transaction per batch, never a round trip per task instance. The first outcome schedules
 * a flush on the next turn of the loop, so everything that fired together is written together.
 * A failed batch is kept and retried; outcomes are never dropped while the triggerer runs.
 */
export class OutcomeWriter {
  #events: TriggerEventRecord[] = [];
  #failures: TriggerFailureRecord[] = [];
  #flushing: Promise<void> | null = null;

  constructor(
    private readonly storage: Storage,
    private readonly log: Logger,
    private readonly options: OutcomeWriterOptions,
    /** Called with the trigger ids whose outcome is committed. */
    private readonly onWritten: (triggerIds: number[]) => void,
    /** Called after each database call (for the loop watch). */
    private readonly onDatabaseCall: () => void = () => {},
  ) {}

  get pending(): number {
    return this.#events.length + this.#failures.length;
  }

  addEvent(triggerId: number, payloadJson: string): void {
    this.#events.push({ triggerId, payloadJson });
    this.#scheduleFlush();
  }

  addFailure(triggerId: number, failure: FailureKwargs): void {
    this.#failures.push({ triggerId, failure });
    this.#scheduleFlush();
  }

  /** Resolves once everything added so far is written, or `timeoutMs` passed. */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((this.pending > 0 || this.#flushing) && Date.now() < deadline) {
      if (!this.#flushing) this.#scheduleFlush();
      await Promise.race([this.#flushing, delay(Math.max(0, deadline - Date.now()), undefined, { ref: false })]);
    }
  }

  #scheduleFlush(): void {
    if (this.#flushing) return;
    this.#flushing = this.#flush().finally(() => {
      this.#flushing = null;
      if (this.pending > 0) this.#scheduleFlush();
    });
  }

  async #flush(): Promise<void> {
    // Let everything that fired in this turn queue up first.
    await nextTurn();
    while (this.pending > 0) {
      if (this.#failures.length > 0) {
        const batch = this.#failures.splice(0, this.options.batchSize);
        const ok = await this.#write(batch, 'failure', () => this.storage.submitFailures(batch));
        if (!ok) {
          this.#failures.unshift(...batch);
          await delay(this.options.retryDelayMs);
        }
        continue;
      }
      const batch = this.#events.splice(0, this.options.batchSize);
      const ok = await this.#write(batch, 'event', () => this.storage.submitEvents(batch));
      if (!ok) {
        this.#events.unshift(...batch);
        await delay(this.options.retryDelayMs);
      }
      // Give timers (fires, heartbeats) a turn between batches.
      await nextTurn();
    }
  }

  async #write(batch: readonly { triggerId: number }[], kind: string, write: () => Promise<MoveResult>): Promise<boolean> {
    try {
      const result = await write();
      this.onDatabaseCall();
      const ids = batch.map((item) => item.triggerId);
      this.log.info(
        { kind, triggers: ids.length, moved_task_instances: result.movedTaskInstances, deleted_triggers: result.deletedTriggers },
        `wrote ${ids.length} trigger ${kind}${ids.length === 1 ? '' : 's'}: ${result.movedTaskInstances} task instance(s) scheduled`,
      );
      this.onWritten(ids);
      return true;
    } catch (error) {
      this.onDatabaseCall();
      this.log.error({ kind, triggers: batch.length, error: describeThrown(error).error }, `writing ${kind}s failed; retrying`);
      return false;
    }
  }
}
