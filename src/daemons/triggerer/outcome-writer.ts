import { EventEmitter } from 'node:events';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from 'pino';
import { describeThrown } from '../../vocabulary/errors.ts';
import type { PreparedMove, Stores, TriggerEventOutcome, TriggerFailureOutcome, TriggerOutcome } from '../../storage/index.ts';
import type { OutcomeSink } from './trigger-runner.ts';
import type { TriggererMetrics } from '../../services/observability/metrics.ts';

export interface OutcomeWriterOptions {
  /** Triggers per transaction: bounds how long one write holds the event loop (SQLite is synchronous). */
  readonly batchSize: number;
  /**
   * Move batches written at once, each in its own transaction. Safe: a batch's task instances
   * are those of its own triggers, and every writer locks trigger rows in id order.
   */
  readonly concurrency: number;
  /** Pause before the first retry of a failed write (ms); it doubles with each failure of that write. */
  readonly retryDelayMs: number;
  /** Longest pause between retries of one failed write (ms). */
  readonly maxRetryDelayMs: number;
  /** Whether an error says the database refused the values written (the dialect knows: see dialect.ts). */
  readonly refusesValues: (error: unknown) => boolean;
  /** Whether an error says the database cannot be used for now, whatever the batch (see dialect.ts): such a batch is never split. */
  readonly unavailable: (error: unknown) => boolean;
  /** Counts events written and their fire-to-commit latency. */
  readonly metrics?: TriggererMetrics;
}

/**
 * What a writer says of its writes, as events (`writer.events.on(...)`): the triggerer follows
 * them, so nothing is called back into the runner from inside a write.
 */
export interface OutcomeWriterEvents {
  /** A batch moved task instances out of deferred (this many): workers and schedulers may have work. */
  moved: [taskInstances: number];
  /** These triggers' outcomes are fully written (task instances moved, rows deleted): they may be forgotten. */
  written: [triggerIds: number[]];
  /** A database call returned: the time it held the loop was the writer's, not a trigger's (the loop watch). */
  'database-call': [];
}

type Kind = TriggerOutcome['kind'];
type Outcome = TriggerOutcome;

/** A batch cut from the queue and made ready (sealed) ahead of its write. */
interface ReadyBatch {
  readonly kind: Kind;
  readonly batch: Outcome[];
  readonly prepared: PreparedMove;
}

/** A batch whose write failed, waiting for its retry. */
interface FailedBatch {
  readonly kind: Kind;
  readonly batch: Outcome[];
  /**
   * It failed only because the database was unavailable (never split to find a culprit): it may
   * be joined with others like it when retried.
   */
  readonly joinable: boolean;
  /** Failed writes of these outcomes so far, without a success in between. */
  readonly failures: number;
  readonly retryAt: number;
}

/**
 * After this many failures of one batch for a reason that may pass (not refused values, nor the
 * database being unavailable), the batch is split anyway: should one outcome in it fail for a
 * reason the dialect does not recognise, the others are written meanwhile.
 */
const SPLIT_AFTER_FAILURES = 3;

/** Batches of fired triggers' rows that may wait for their delete while outcomes keep coming in. */
const DELETE_DURING_BURST_BATCHES = 5;

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
 * No outcome holds up another. A batch the database refuses for its values is split at once,
 * down to the outcome(s) refused; each of those fails its own task instances instead
 * (DF_OUTCOME_REFUSED, naming the trigger and the reason). A batch failing for another reason (a
 * lost connection) is kept and retried with backoff, split after a few failures, while later
 * outcomes are written as usual; it is reported once per distinct error with the number of
 * outcomes waiting. Outcomes are never dropped while the triggerer runs.
 */
export class OutcomeWriter implements OutcomeSink {
  /** What was written: see OutcomeWriterEvents. */
  readonly events = new EventEmitter<OutcomeWriterEvents>();
  #events: TriggerEventOutcome[] = [];
  #failures: TriggerFailureOutcome[] = [];
  /**
   * The next round's batches, cut and being sealed while this round's are written (with
   * encryption, sealing a large batch happens on another thread: see Keyring.sealMany).
   */
  #ahead: ReadyBatch[] = [];
  #aheadCount = 0;
  /** Triggers whose task instances were moved; their rows are still to be deleted. */
  #moved: number[] = [];
  /** Outcomes added since the flush loop's round began: while they keep coming, deletes wait (see #flush). */
  #addedThisRound = 0;
  /** Batches waiting for a retry, and how many outcomes they hold. */
  #retrying: FailedBatch[] = [];
  #retryingCount = 0;
  /** Failure records that replaced a refused outcome: should one be refused too, it is not replaced again. */
  readonly #replacements = new WeakSet<Outcome>();
  /** Errors reported since writes last all succeeded: each distinct one is logged once. */
  readonly #reported = new Map<string, number>();
  /** Failed deletes of fired rows in a row, and when the next may be tried (a backoff of their own). */
  #deleteFailures = 0;
  #deleteRetryAt = 0;
  #flushing: Promise<void> | null = null;
  /** Ends the flush loop's wait for a retry when new outcomes come in. */
  #wakeFlush: (() => void) | null = null;
  #closed = false;

  constructor(
    private readonly storage: Pick<Stores, 'triggers'>,
    private readonly log: Logger,
    private readonly options: OutcomeWriterOptions,
  ) {}

  /** Outcomes not fully written yet. */
  get pending(): number {
    return this.#events.length + this.#failures.length + this.#aheadCount + this.#moved.length + this.#retryingCount;
  }

  /** Takes an outcome to write with the next batch of its kind (failures first). */
  add(outcome: TriggerOutcome): void {
    if (outcome.kind === 'event') this.#events.push(outcome);
    else this.#failures.push(outcome);
    this.#addedThisRound++;
    this.#scheduleFlush();
  }

  /**
   * Another statement of this process just succeeded (a heartbeat): the database is back, so
   * writes waiting out their backoff are retried now rather than up to maxRetryDelayMs later.
   */
  retryNow(): void {
    if (this.#retrying.length === 0 && this.#deleteRetryAt === 0) return;
    const now = Date.now();
    this.#retrying = this.#retrying.map((failed) => (failed.retryAt > now ? { ...failed, retryAt: now } : failed));
    this.#deleteRetryAt = Math.min(this.#deleteRetryAt, now);
    this.#scheduleFlush();
  }

  /** Resolves once everything added so far is written, or `timeoutMs` passed. */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.pending > 0 && Date.now() < deadline) {
      this.#scheduleFlush();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.#flushing, new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, deadline - Date.now()))))]);
      clearTimeout(timer);
    }
  }

  /**
   * Writes nothing more (the database is about to close). What is left unwritten is not lost:
   * the stopping triggerer releases its triggers, and a peer runs them again; fired triggers'
   * rows are removed by any triggerer's periodic cleanup.
   */
  close(): void {
    this.#closed = true;
    this.#wakeFlush?.();
  }

  #scheduleFlush(): void {
    this.#wakeFlush?.();
    if (this.#flushing || this.#closed) return;
    this.#flushing = this.#flush().finally(() => {
      this.#flushing = null;
      if (this.pending > 0 && !this.#closed) this.#scheduleFlush();
    });
  }

  async #flush(): Promise<void> {
    // Let everything that fired in this turn queue up first.
    await nextTurn();
    while (this.pending > 0 && !this.#closed) {
      const now = Date.now();
      // Still firing (outcomes came in during the last round): the rows of fired triggers are
      // deleted once the burst is over, so each batch of moves in it is written a delete sooner
      // (at 100,000 due at once, deletes between the moves held back the last move by a fifth).
      // A steady stream deletes anyway once a few batches of rows wait.
      const burst = this.#addedThisRound > 0 && this.#moved.length < DELETE_DURING_BURST_BATCHES * this.options.batchSize;
      this.#addedThisRound = 0;
      const writes: Promise<void>[] = [];
      // Retries that are due first (oldest outcomes), then new outcomes, failures before events.
      while (writes.length < this.options.concurrency) {
        const due = this.#retrying.findIndex((failed) => failed.retryAt <= now);
        if (due < 0) break;
        const [failed] = this.#retrying.splice(due, 1);
        this.#retryingCount -= failed!.batch.length;
        writes.push(this.#moveBatch(failed!.kind, this.#joinRetries(failed!), failed!.failures));
      }
      while (writes.length < this.options.concurrency) {
        const ahead = this.#ahead.shift();
        if (ahead) this.#aheadCount -= ahead.batch.length;
        const ready = ahead ?? this.#cutBatch();
        if (!ready) break;
        writes.push(this.#moveBatch(ready.kind, ready.batch, 0, ready.prepared));
      }
      // A backlog: the next round's full batches are cut now, to be sealed while these are written.
      while (writes.length > 0 && this.#ahead.length < this.options.concurrency && this.#failures.length + this.#events.length >= this.options.batchSize) {
        const ready = this.#cutBatch()!;
        this.#ahead.push(ready);
        this.#aheadCount += ready.batch.length;
      }
      if (writes.length === 0 && !burst && this.#moved.length > 0 && this.#deleteRetryAt <= now) writes.push(this.#deleteBatch());
      if (writes.length === 0) {
        await this.#waitForWork();
      } else {
        await Promise.all(writes);
      }
      // Give timers (fires, heartbeats) a turn between batches.
      await nextTurn();
    }
  }

  /** The next batch from the queues (failures first), made ready to write; null when both are empty. */
  #cutBatch(): ReadyBatch | null {
    if (this.#failures.length + this.#events.length === 0) return null;
    const kind: Kind = this.#failures.length > 0 ? 'failure' : 'event';
    const queue: Outcome[] = kind === 'failure' ? this.#failures : this.#events;
    const batch = queue.splice(0, this.options.batchSize);
    return { kind, batch, prepared: this.#prepare(kind, batch) };
  }

  #prepare(kind: Kind, batch: Outcome[]): PreparedMove {
    // A batch holds one kind: it was cut from one queue, or joined from retries of that kind.
    return this.storage.triggers.prepareOutcomes(kind === 'failure' ? (batch as TriggerFailureOutcome[]) : (batch as TriggerEventOutcome[]));
  }

  /** Waits until the next retry (of a move or a delete) is due, or new outcomes come in. */
  async #waitForWork(): Promise<void> {
    const dueTimes = this.#retrying.map((failed) => failed.retryAt);
    if (this.#moved.length > 0) dueTimes.push(this.#deleteRetryAt);
    const waitMs = Math.max(0, Math.min(...dueTimes) - Date.now());
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.#wakeFlush = resolve;
      timer = setTimeout(resolve, waitMs);
    });
    clearTimeout(timer);
    this.#wakeFlush = null;
  }

  /** Writes one batch; `prepared` when it was made ready ahead, else (a retry) it is made ready now. */
  async #moveBatch(kind: Kind, batch: Outcome[], failures: number, prepared?: PreparedMove): Promise<void> {
    try {
      const { movedTaskInstances, endedTaskInstances, resolvedComposites } = await this.storage.triggers.moveDeferredTaskInstances(
        prepared ?? this.#prepare(kind, batch),
      );
      this.events.emit('database-call');
      const metrics = this.options.metrics;
      if (kind === 'event' && metrics) {
        const committedAt = performance.now();
        metrics.eventsWritten.inc(batch.length);
        for (const event of batch as TriggerEventOutcome[]) metrics.eventCommitLatency.observe((committedAt - event.firedAt) / 1000);
      }
      for (const outcome of batch) this.#moved.push(outcome.triggerId);
      // A composite wait these fired into and that is done: deleted with them, and its other members with it.
      this.#moved.push(...resolvedComposites);
      if (movedTaskInstances + endedTaskInstances > 0) this.events.emit('moved', movedTaskInstances + endedTaskInstances);
      this.log.info(
        { kind, triggers: batch.length, moved_task_instances: movedTaskInstances, ended_task_instances: endedTaskInstances },
        `wrote ${batch.length} trigger ${kind}${batch.length === 1 ? '' : 's'}: ${movedTaskInstances} task instance(s) scheduled` +
          (endedTaskInstances > 0 ? `, ${endedTaskInstances} ended by their trigger` : ''),
      );
      this.#noteRecovered();
    } catch (error) {
      this.events.emit('database-call');
      if (this.#closed) {
        this.#retry(kind, batch, failures, 0, false);
        return;
      }
      if (this.options.refusesValues(error)) {
        // Split at once: the halves the database accepts are written on the next pass.
        if (batch.length === 1) this.#refuse(kind, batch[0]!, error);
        else this.#retryInHalves(kind, batch, 0, 0);
        return;
      }
      const failed = failures + 1;
      const delayMs = this.#backoffMs(failed);
      // Split only for a reason that may lie in the batch: through an outage every write fails,
      // and a batch split down to single outcomes would be written one transaction at a time
      // once the database is back (a 10 s restart left 1,905 of them to drain for 13 s).
      const unavailable = this.options.unavailable(error);
      if (batch.length > 1 && failed >= SPLIT_AFTER_FAILURES && !unavailable) this.#retryInHalves(kind, batch, failed, delayMs);
      else this.#retry(kind, batch, failed, delayMs, unavailable);
      // Waiting: outcomes whose task instances have not moved yet (fired rows still to delete are done for them).
      const waiting = this.#events.length + this.#failures.length + this.#retryingCount;
      this.#report(error, { kind, waiting, retry_in_ms: delayMs }, `writing trigger ${kind}s failed; ${waiting} outcome(s) waiting, retrying with backoff`);
    }
  }

  /**
   * `failed`'s outcomes, with those of the other retries that failed only because
   * the database was unavailable, up to a batch: through an outage every new outcome's first
   * write fails on its own, and retried apart once the database is back they would take a
   * transaction each (a 10 s restart left 3,000–4,000 of them to drain for 11–15 s).
   */
  #joinRetries(failed: FailedBatch): Outcome[] {
    if (!failed.joinable) return failed.batch;
    const batch = [...failed.batch];
    for (let j = 0; j < this.#retrying.length && batch.length < this.options.batchSize; ) {
      const other = this.#retrying[j]!;
      // Due or not: while the database is away they fail together, one write instead of many.
      if (other.kind !== failed.kind || !other.joinable || batch.length + other.batch.length > this.options.batchSize) {
        j++;
        continue;
      }
      this.#retrying.splice(j, 1);
      this.#retryingCount -= other.batch.length;
      batch.push(...other.batch);
    }
    return batch;
  }

  #retryInHalves(kind: Kind, batch: Outcome[], failures: number, delayMs: number): void {
    const half = Math.ceil(batch.length / 2);
    this.#retry(kind, batch.slice(half), failures, delayMs, false);
    this.#retry(kind, batch.slice(0, half), failures, delayMs, false);
  }

  #retry(kind: Kind, batch: Outcome[], failures: number, delayMs: number, joinable: boolean): void {
    // Newest first, so the first half of a split batch is written first.
    this.#retrying.unshift({ kind, batch, joinable, failures, retryAt: Date.now() + delayMs });
    this.#retryingCount += batch.length;
  }

  /**
   * The database refused this one outcome for its values: its task instances fail instead (the
   * marker is deferflow's own text, made storable), and every other outcome is written as usual.
   */
  #refuse(kind: Kind, outcome: Outcome, error: unknown): void {
    const reason = describeThrown(error).error;
    const { triggerId } = outcome;
    if (this.#replacements.has(outcome)) {
      // The replacement marker itself was refused: nothing more can be written for this trigger.
      // Its task instances stay deferred until their timeout; the runner keeps holding it, so it
      // is not run again.
      this.log.error(
        { code: 'DF_OUTCOME_REFUSED', trigger_id: triggerId, error: reason },
        `the database refused even the failure record for trigger ${triggerId}; its task instances stay deferred until their timeout: ${reason}`,
      );
      return;
    }
    const what = kind === 'event' ? 'event' : 'failure record';
    const message = `the database refused the ${what} of trigger ${triggerId}: ${reason}`;
    this.log.error(
      { code: 'DF_OUTCOME_REFUSED', trigger_id: triggerId, kind, error: reason },
      `${message}; failing its task instances with DF_OUTCOME_REFUSED`,
    );
    const replacement: TriggerFailureOutcome = {
      kind: 'failure',
      triggerId,
      failure: { code: 'DF_OUTCOME_REFUSED', error: `OutcomeRefused: ${message}`, traceback: null, reason: 'trigger_failure' },
    };
    this.#replacements.add(replacement);
    this.#failures.unshift(replacement);
  }

  /** Logs a failed write (a move or a delete) once per distinct error until writes succeed again; repeats go to debug. */
  #report(error: unknown, fields: Record<string, unknown>, what: string): void {
    const text = describeThrown(error).error;
    const seen = this.#reported.get(text) ?? 0;
    this.#reported.set(text, seen + 1);
    const line = { code: 'DF_DATABASE', ...fields, error: text };
    if (seen === 0) this.log.error(line, `${what} (reported once until writes succeed): ${text}`);
    else this.log.debug({ ...line, failures: seen + 1 }, `${what}: ${text}`);
  }

  #noteRecovered(): void {
    if (this.#reported.size === 0 || this.#retrying.length > 0) return;
    const failures = [...this.#reported.values()].reduce((sum, count) => sum + count, 0);
    this.#reported.clear();
    this.log.info({ failed_writes: failures }, `writing trigger outcomes works again after ${failures} failed write(s)`);
  }

  #backoffMs(failures: number): number {
    return Math.min(this.options.maxRetryDelayMs, this.options.retryDelayMs * 2 ** Math.max(0, failures - 1));
  }

  async #deleteBatch(): Promise<void> {
    const ids = this.#moved.splice(0, this.options.batchSize);
    try {
      const deleted = await this.storage.triggers.deleteUnusedTriggers(ids);
      this.events.emit('database-call');
      this.#deleteFailures = 0;
      this.#deleteRetryAt = 0;
      this.log.debug({ fired_triggers: ids.length, deleted_triggers: deleted }, `deleted ${deleted} fired trigger(s)`);
      this.events.emit('written', ids);
      this.#noteRecovered();
    } catch (error) {
      this.events.emit('database-call');
      this.#moved.unshift(...ids);
      if (this.#closed) return;
      this.#deleteFailures++;
      const delayMs = this.#backoffMs(this.#deleteFailures);
      this.#deleteRetryAt = Date.now() + delayMs;
      this.#report(error, { triggers: ids.length, retry_in_ms: delayMs }, 'deleting fired triggers failed; retrying with backoff');
    }
  }
}
