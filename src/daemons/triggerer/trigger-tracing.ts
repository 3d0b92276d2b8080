import type { Logger } from 'pino';
import type { Stores } from '../../storage/index.ts';
import type { WaitingTaskInstance } from '../../storage/task-instances-waiting-on.ts';
import type { Tracing } from '../../services/observability/tracing.ts';
import { errorFields } from '../../vocabulary/errors.ts';
import { groupBy } from '../../vocabulary/group-by.ts';
import type { TaskEndState } from '../../authoring/triggers/trigger-event.ts';

/** A run being traced: when it started, and the read of the task instances waiting on it. */
interface TracedRun {
  readonly classpath: string;
  readonly startedAt: number;
  readonly waiting: Promise<Map<number, WaitingTaskInstance[]>>;
}

/**
 * The spans of a triggerer's trigger runs, with tracing on (see tracing.ts): when a run ends,
 * one span for each task instance that waited on it, in that task instance's trace, from when
 * this triggerer started the run to its end, with its event, its owner and its outcome. Which
 * task instances wait on a trigger is read as its run starts (while they still point at it),
 * once per batch of runs started together, not per trigger. Nothing of this exists with tracing off.
 */
export class TriggerTracing {
  readonly #runs = new Map<number, TracedRun>();
  /** Runs started since the last read, and the read that will name their task instances. */
  #batch: { readonly ids: number[]; readonly read: Promise<Map<number, WaitingTaskInstance[]>> } | null = null;
  #readFailed = false;

  constructor(
    private readonly tracing: Tracing,
    private readonly storage: Pick<Stores, 'triggers'>,
    private readonly log: Logger,
    private readonly owner: { readonly jobId: () => number | null; readonly hostname: string },
  ) {}

  /** A run started on this triggerer. */
  started(triggerId: number, classpath: string): void {
    this.#runs.set(triggerId, { classpath, startedAt: Date.now(), waiting: this.#readWaiting(triggerId) });
  }

  /**
   * A run ended: `fired` (its event came now), `failed`, or `stopped` without an outcome. An
   * event that ends its task instances (`endState`) ends their traces too: their root spans are
   * emitted here, as the worker does for the others.
   */
  ended(triggerId: number, how: 'fired' | 'failed' | 'stopped', endState: TaskEndState | null): void {
    const run = this.#runs.get(triggerId);
    if (!run) return;
    this.#runs.delete(triggerId);
    const endedAt = Date.now();
    const triggererJobId = this.owner.jobId();
    void run.waiting.then((byTrigger) => {
      for (const waiting of byTrigger.get(triggerId) ?? []) {
        this.tracing.recordTriggerRun(
          {
            taskInstance: waiting,
            tryNumber: waiting.tryNumber,
            triggerId,
            classpath: run.classpath,
            triggererJobId,
            hostname: this.owner.hostname,
            startedAt: run.startedAt,
            endedAt,
            outcome: how === 'fired' ? 'event' : how,
          },
          how === 'fired' ? endedAt : null,
        );
        if (endState !== null)
          this.tracing.recordTaskInstance(waiting, { state: endState, tries: waiting.tryNumber, madeAt: waiting.madeAt, endedAt: Date.now() });
      }
    });
  }

  /** The read naming the task instances of the runs started in this turn of the loop: one query for all of them. */
  #readWaiting(triggerId: number): Promise<Map<number, WaitingTaskInstance[]>> {
    if (this.#batch) {
      this.#batch.ids.push(triggerId);
      return this.#batch.read;
    }
    const ids = [triggerId];
    const read = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => {
        this.#batch = null;
        return this.storage.triggers.listTaskInstancesWaitingOn(ids);
      })
      .then(
        (rows) => {
          this.#readFailed = false;
          return groupBy(rows, (row) => row.triggerId);
        },
        (error: unknown) => {
          // Once until a read succeeds: an outage is logged elsewhere, and costs only these spans.
          if (!this.#readFailed)
            this.log.warn(
              errorFields(error, 'DF_DATABASE'),
              'reading the task instances of started triggers for their traces failed; their spans are not emitted',
            );
          this.#readFailed = true;
          return new Map<number, WaitingTaskInstance[]>();
        },
      );
    this.#batch = { ids, read };
    return read;
  }
}
