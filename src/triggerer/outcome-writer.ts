import { setTimeout as delay, setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from 'pino';
import { describeThrown } from '../errors.ts';
import type { FailureKwargs, MoveResult, Storage, TriggerEventRecord, TriggerFailureRecord } from '../storage/index.ts';
import type { TaskEndState } from '../triggers/trigger-event.ts';

export interface OutcomeWriterOptions {
  /** Triggers per transaction: bounds how long one write holds the event loop (SQLite is synchronous). */
  readonly batchSize: number;
  /**
   * Move batches written at once, each in its own transaction. Safe: a batch's task instances
   * are those of its own triggers, and every writer locks trigger rows in id order.
   */
  readonly concurrency: number;
  readonly retryDelayMs: number;
}

/**
 * Collects what triggers produced and writes it in batches: many task instances per statement,
 * one transaction per batch, never a round trip per task instance. The first outcome schedules
 * a flush on the next turn of the loop, so everything that fired together is written together.
 *
 * An outcome goes through two writes: its task instances move to scheduled (first, as soon as
 * possible: that is what makes them runnable), then, once no move is waiting, its trigger row
 * is deleted if nothing points at it. Only then is the trigger forgotten: until its row is gone
 * the runner still holds it, so the triggerer neither restarts it nor counts it free.
 *
 * A failed batch is kept and retried; outcomes are never dropped while the triggerer runs.
 */
export class OutcomeWriter {
  #events: TriggerEventRecord[] = [];
  #failures: TriggerFailureRecord[] = [];
  /** Triggers whose task instances were moved; their rows are still to be deleted. */
  #moved: number[] = [];
  #flushing: Promise<void> | null = null;
  #closed = false;

  constructor(
    private readonly storage: Storage,
    private readonly log: Logger,
    private readonly options: OutcomeWriterOptions,
    /** Called with the trigger ids whose outcome is fully written. */
    private readonly onWritten: (triggerIds: number[]) => void,
    /** Called after each database call (for the loop watch). */
    private readonly onDatabaseCall: () => void = () => {},
    /** Called after a batch moved task instances out of deferred. */
    private readonly onMoved: () => void = () => {},
  ) {}

  /** Outcomes not fully written yet. */
  get pending(): number {
    return this.#events.length + this.#failures.length + this.#moved.length;
  }

  addEvent(triggerId: number, payloadJson: string, endState: TaskEndState | null = null): void {
    this.#events.push({ triggerId, payloadJson, endState });
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

  /**
   * Writes nothing more (the database is about to close). What is left unwritten is not lost:
   * the stopping triggerer releases its triggers, and a peer runs them again; fired triggers'
   * rows are removed by any triggerer's periodic cleanup.
   */
  close(): void {
    this.#closed = true;
  }

  #scheduleFlush(): void {
    if (this.#flushing || this.#closed) return;
    this.#flushing = this.#flush().finally(() => {
      this.#flushing = null;
      if (this.pending > 0) this.#scheduleFlush();
    });
  }

  async #flush(): Promise<void> {
    // Let everything that fired in this turn queue up first.
    await nextTurn();
    while (this.pending > 0 && !this.#closed) {
      const writes: Promise<boolean>[] = [];
      while (writes.length < this.options.concurrency && this.#failures.length + this.#events.length > 0) {
        writes.push(
          this.#failures.length > 0
            ? this.#moveBatch('failure', this.#failures, (batch) => this.storage.submitFailures(batch))
            : this.#moveBatch('event', this.#events, (batch) => this.storage.submitEvents(batch)),
        );
      }
      if (writes.length === 0) writes.push(this.#deleteBatch());
      const ok = (await Promise.all(writes)).every(Boolean);
      if (!ok && !this.#closed) await delay(this.options.retryDelayMs);
      // Give timers (fires, heartbeats) a turn between batches.
      await nextTurn();
    }
  }

  async #moveBatch<Outcome extends { triggerId: number }>(
    kind: 'event' | 'failure',
    queue: Outcome[],
    write: (batch: Outcome[]) => Promise<MoveResult>,
  ): Promise<boolean> {
    const batch = queue.splice(0, this.options.batchSize);
    try {
      const { movedTaskInstances, endedTaskInstances } = await write(batch);
      this.onDatabaseCall();
      for (const outcome of batch) this.#moved.push(outcome.triggerId);
      if (movedTaskInstances + endedTaskInstances > 0) this.onMoved();
      this.log.info(
        { kind, triggers: batch.length, moved_task_instances: movedTaskInstances, ended_task_instances: endedTaskInstances },
        `wrote ${batch.length} trigger ${kind}${batch.length === 1 ? '' : 's'}: ${movedTaskInstances} task instance(s) scheduled` +
          (endedTaskInstances > 0 ? `, ${endedTaskInstances} ended by their trigger` : ''),
      );
      return true;
    } catch (error) {
      this.onDatabaseCall();
      queue.unshift(...batch);
      if (this.#closed) return false;
      this.log.error({ kind, triggers: batch.length, error: describeThrown(error).error }, `writing ${kind}s failed; retrying`);
      return false;
    }
  }

  async #deleteBatch(): Promise<boolean> {
    const ids = this.#moved.splice(0, this.options.batchSize);
    try {
      const deleted = await this.storage.cleanUnusedTriggers(ids);
      this.onDatabaseCall();
      this.log.debug({ fired_triggers: ids.length, deleted_triggers: deleted }, `deleted ${deleted} fired trigger(s)`);
      this.onWritten(ids);
      return true;
    } catch (error) {
      this.onDatabaseCall();
      this.#moved.unshift(...ids);
      if (this.#closed) return false;
      this.log.error({ triggers: ids.length, error: describeThrown(error).error }, 'deleting fired triggers failed; retrying');
      return false;
    }
  }
}
