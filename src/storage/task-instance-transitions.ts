import { sql } from '../database/kysely.ts';
import type { ExpressionBuilder } from 'kysely';
import { fromDbTime, toDbTime, type DatabaseSchema, type TaskInstanceState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import type { EncryptionKeyError } from '../vocabulary/errors.ts';
import { openNextKwargs } from './sealed-values.ts';
import { recordTaskReschedule } from './task-reschedules.ts';
import { wakeForChangedRows } from './wake.ts';
import { stillHeld, type HeldTry } from './held-try.ts';
import { DEFAULT_QUEUES, type QueueSet } from '../model/queues.ts';
import { inQueue } from './queue-filter.ts';

/*
 * The worker's transitions of a task instance: claim, start, finish, hand back. The whole state
 * machine, every transition and who performs it, is in task-instance-state-machine.ts.
 * try_number counts starts: it goes up when a task instance starts running, but not when it
 * resumes from a deferral (the same try goes on).
 */

export interface ClaimedTaskInstance {
  readonly id: number;
  readonly dagId: string;
  readonly taskId: string;
  readonly runId: string;
  readonly mapIndex: number;
  /** The operator's class name, as the scheduler recorded it (null for task instances made without one). */
  readonly operator: string | null;
  /** Where DAG processing last found the DAG's file; null when the DAG is deleted or unknown. */
  readonly fileloc: string | null;
  /** The DAG run's logical date (epoch ms) and conf (JSON text); null if the run is gone. */
  readonly logicalDate: number | null;
  readonly confJson: string | null;
  /** The DAG run's data interval (epoch ms); null for a run that has none (manual runs). */
  readonly dataIntervalStart: number | null;
  readonly dataIntervalEnd: number | null;
  /** Its queue: the triggers it defers on inherit it. */
  readonly queue: string;
}

export interface WorkerIdentity {
  readonly jobId: number;
  readonly hostname: string;
  readonly pid: number;
}

/**
 * Moves up to `limit` scheduled task instances to queued for this worker, highest
 * priority_weight first, then oldest, passing over those of DAGs marked deleted. On PostgreSQL the candidates are locked with SKIP LOCKED,
 * so several workers claim disjoint sets without waiting; on SQLite the write lock does that.
 * The candidates are a MATERIALIZED CTE, evaluated once: as an `IN (subquery)` PostgreSQL may
 * run the locking subquery more than once, each run skipping what the last one locked, and so
 * claim more than `limit` rows. `wakeScheduler`: the claim pushes the schedulers a wake-up if it
 * took anything (see the worker's claim loop). `queues`: only task instances in these queues are
 * claimed (`default` if not given); serving several, the worker takes the first `limit` of each
 * (an index range each: see queue-filter.ts) and keeps the best `limit`.
 */
export async function claimTaskInstances(
  { db, adapter }: StorageContext,
  worker: WorkerIdentity,
  limit: number,
  now: number,
  { wakeScheduler = false, queues = DEFAULT_QUEUES }: { readonly wakeScheduler?: boolean; readonly queues?: QueueSet } = {},
): Promise<ClaimedTaskInstance[]> {
  if (limit <= 0) return [];
  const inOneQueue = (queue: string) =>
    adapter.lockSkippingLocked(
      db
        .selectFrom('task_instance')
        .select(['id', 'priority_weight'])
        .where('state', '=', 'scheduled')
        .where(inQueue(queue))
        // A DAG marked deleted (its file was not found by the last DAG processing) may come back:
        // its task instances wait, scheduled, rather than fail for want of code.
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('serialized_dag')
                .select('serialized_dag.dag_id')
                .whereRef('serialized_dag.dag_id', '=', 'task_instance.dag_id')
                .where('serialized_dag.deleted_at', 'is not', null),
            ),
          ),
        )
        .orderBy('priority_weight', 'desc')
        .orderBy('id')
        .limit(limit),
    );
  const [first, ...others] = queues.map(inOneQueue);
  const candidates =
    others.length === 0
      ? first!
      : db
          .selectFrom(
            others
              .reduce(
                (union, branch, index) => union.unionAll(db.selectFrom(branch.as(`q${index + 1}`)).selectAll()),
                db.selectFrom(first!.as('q0')).selectAll(),
              )
              .as('served'),
          )
          .select(['served.id', 'served.priority_weight'])
          .orderBy('served.priority_weight', 'desc')
          .orderBy('served.id')
          .limit(limit);
  const rows = await db
    .with(
      (cte) => cte('candidate').materialized(),
      () => candidates,
    )
    // transition: claim
    .updateTable('task_instance')
    .set({
      state: 'queued',
      queued_at: toDbTime(now),
      worker_job_id: worker.jobId,
      hostname: worker.hostname,
      pid: worker.pid,
      updated_at: toDbTime(now),
    })
    .where('id', 'in', (eb) => eb.selectFrom('candidate').select('candidate.id'))
    .where('state', '=', 'scheduled')
    // What the worker needs to run each one comes back with the claim, not a query per task.
    .returning(claimedColumns)
    .$if(wakeScheduler, (query) => query.returning(wakeForChangedRows(adapter, 'scheduler')))
    .execute();
  return rows.map(toClaimed);
}

/**
 * Task instances queued for this worker that it does not hold (`held`): a claim whose commit
 * went through while its answer was lost (the connection dropped as it committed) left them
 * there, and a live worker's task instances are never reaped. The worker takes them up after a
 * claim that failed.
 */
export async function claimedButNotHeld({ db }: StorageContext, workerJobId: number, held: readonly number[]): Promise<ClaimedTaskInstance[]> {
  let query = db.selectFrom('task_instance').select(claimedColumns).where('state', '=', 'queued').where('worker_job_id', '=', workerJobId);
  if (held.length > 0) query = query.where('id', 'not in', held);
  return (await query.orderBy('id').execute()).map(toClaimed);
}

function claimedColumns(eb: ExpressionBuilder<DatabaseSchema, 'task_instance'>) {
  return [
    'id',
    'dag_id',
    'task_id',
    'run_id',
    'map_index',
    'operator',
    'queue',
    eb
      .selectFrom('serialized_dag')
      .select('fileloc')
      .whereRef('serialized_dag.dag_id', '=', 'task_instance.dag_id')
      .where('deleted_at', 'is', null)
      .as('fileloc'),
    runColumn(eb, 'logical_date'),
    runColumn(eb, 'conf'),
    runColumn(eb, 'data_interval_start'),
    runColumn(eb, 'data_interval_end'),
  ] as const;
}

function toClaimed(row: {
  id: number;
  dag_id: string;
  task_id: string;
  run_id: string;
  map_index: number;
  operator: string | null;
  queue: string;
  fileloc: string | null;
  logical_date: Date | string | null;
  conf: string | null;
  data_interval_start: Date | string | null;
  data_interval_end: Date | string | null;
}): ClaimedTaskInstance {
  return {
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    runId: row.run_id,
    mapIndex: row.map_index,
    operator: row.operator,
    queue: row.queue,
    fileloc: row.fileloc ?? null,
    logicalDate: row.logical_date == null ? null : fromDbTime(row.logical_date),
    confJson: row.conf ?? null,
    dataIntervalStart: row.data_interval_start == null ? null : fromDbTime(row.data_interval_start),
    dataIntervalEnd: row.data_interval_end == null ? null : fromDbTime(row.data_interval_end),
  };
}

/** A column of the task instance's DAG run, as a correlated subquery (null without a run: a task instance made by createTaskInstance has none). */
function runColumn<Column extends 'logical_date' | 'conf' | 'data_interval_start' | 'data_interval_end'>(
  eb: ExpressionBuilder<DatabaseSchema, 'task_instance'>,
  column: Column,
) {
  return eb
    .selectFrom('dag_run')
    .select(column)
    .whereRef('dag_run.dag_id', '=', 'task_instance.dag_id')
    .whereRef('dag_run.run_id', '=', 'task_instance.run_id')
    .as(column);
}

export interface StartedTaskInstance {
  readonly tryNumber: number;
  /** The worker's job running it: with tryNumber, the HeldTry its writes are conditional on. */
  readonly workerJobId: number;
  /** The method to resume at (a deferral came back), or null for a fresh execute(). */
  readonly nextMethod: string | null;
  /** JSON text of the resumed method's kwargs (with the event), or null. */
  readonly nextKwargsJson: string | null;
  /** next_kwargs or the event could not be decrypted (nextKwargsJson is null): the try fails with this, without retries. */
  readonly unreadableKwargs?: EncryptionKeyError;
  /** When execution_timeout runs out, or null when the task has none. */
  readonly executionDeadline: number | null;
  /** Epoch ms: when this run started (a resume or a rescheduled run is a run of its own). */
  readonly startedAt: number;
}

/**
 * queued → running for the worker that claimed it. A fresh start takes the next try_number and,
 * when the task has an execution timeout, fixes its deadline; a resume from a deferral keeps
 * both (the timeout spans the whole task, deferrals included). Null when the task instance is
 * no longer queued for this worker (cleared, or reaped as a zombie meanwhile).
 */
export async function startTaskInstance(
  { db, keyring }: StorageContext,
  taskInstanceId: number,
  workerJobId: number,
  executionTimeoutMs: number | null,
  now: number,
): Promise<StartedTaskInstance | null> {
  const resuming = sql<boolean>`next_method is not null`;
  const row = await db
    // transition: start
    .updateTable('task_instance')
    .set({
      state: 'running',
      // A task started from its trigger resumes in its first try (its wait was that try, as
      // when the trigger ends it: see move-deferred-task-instances.ts).
      try_number: sql<number>`case when ${resuming} then (case when try_number = 0 then 1 else try_number end) else try_number + 1 end`,
      start_date: sql<string>`coalesce(start_date, ${toDbTime(now)})`,
      end_date: null,
      execution_deadline:
        executionTimeoutMs === null
          ? sql<string | null>`case when ${resuming} then execution_deadline else null end`
          : sql<string>`case when ${resuming} and execution_deadline is not null then execution_deadline else ${toDbTime(now + executionTimeoutMs)} end`,
      updated_at: toDbTime(now),
    })
    .where('id', '=', taskInstanceId)
    .where('state', '=', 'queued')
    .where('worker_job_id', '=', workerJobId)
    .returning(['try_number', 'next_method', 'next_kwargs', 'next_event', 'execution_deadline'])
    .executeTakeFirst();
  // Already running on this worker: an earlier attempt of this start committed, but its answer
  // was lost with the connection (the worker retries a start through an outage). That start is
  // this one; only the claiming worker's start moves a task instance it holds to running.
  const started =
    row ??
    (await db
      .selectFrom('task_instance')
      .select(['try_number', 'next_method', 'next_kwargs', 'next_event', 'execution_deadline'])
      .where('id', '=', taskInstanceId)
      .where('state', '=', 'running')
      .where('worker_job_id', '=', workerJobId)
      .executeTakeFirst());
  if (!started) return null;
  // The event goes with the resume it is for: a fresh try (next_method null) may find the event of
  // an earlier resumed try kept for display, and neither gets nor needs to decrypt it.
  const opened = openNextKwargs(keyring, taskInstanceId, started.next_kwargs, started.next_method === null ? null : started.next_event);
  return {
    tryNumber: started.try_number,
    workerJobId,
    nextMethod: started.next_method,
    nextKwargsJson: opened.json,
    ...(opened.unreadable ? { unreadableKwargs: opened.unreadable } : {}),
    executionDeadline: fromDbTime(started.execution_deadline),
    startedAt: now,
  };
}

/** How a run of a task instance ended (a deferral is recorded by deferTaskInstance instead). */
export type TaskOutcome =
  | {
      readonly state: 'success';
      /** JSON text of what execute() returned, or null. */
      readonly returnValueJson: string | null;
      /** A branch: the direct downstream tasks it follows; the others are skipped with its success. */
      readonly followTaskIds?: readonly string[];
    }
  | { readonly state: 'skipped' }
  | { readonly state: 'failed' }
  | { readonly state: 'up_for_retry'; readonly readyAt: number }
  /** `startedAt`: when this run (a sensor's poke) started, for the reschedule's history row. */
  | { readonly state: 'up_for_reschedule'; readonly readyAt: number; readonly startedAt: number };

/**
 * running → the outcome's state, for the worker that runs the try. next_method and next_kwargs
 * are cleared: a finished run resumes nothing, and a retried or rescheduled one starts afresh. A
 * reschedule gives its try back (try_number - 1): the next start takes the same number; it
 * also writes the reschedule's history row, in the same transaction. False when the worker no
 * longer holds the try (see HeldTry), or a signal asked to stop it (see carryOutStopRequest):
 * its outcome is dropped, as it must be.
 */
export async function finishTaskInstance(
  { db, adapter, keyring }: StorageContext,
  taskInstanceId: number,
  held: HeldTry,
  outcome: TaskOutcome,
  now: number,
): Promise<boolean> {
  const terminal: readonly TaskInstanceState[] = ['success', 'skipped', 'failed'];
  if (outcome.state === 'up_for_reschedule') {
    return db.transaction().execute(async (trx) => {
      const finished = await finishRun({ db: trx, adapter, keyring }, taskInstanceId, held, outcome, terminal, now);
      if (!finished) return false;
      // The try given back is the one the next run takes again: the number before the decrement.
      await recordTaskReschedule(
        { db: trx, adapter, keyring },
        { taskInstanceId, tryNumber: finished.tryNumber + 1, startedAt: outcome.startedAt, endedAt: now, readyAt: outcome.readyAt },
      );
      return true;
    });
  }
  if (outcome.state === 'success' && outcome.followTaskIds !== undefined) {
    const follow = outcome.followTaskIds;
    return db.transaction().execute(async (trx) => {
      const finished = await finishRun({ db: trx, adapter, keyring }, taskInstanceId, held, outcome, terminal, now);
      if (!finished) return false;
      await skipBranchesNotFollowed({ db: trx, adapter, keyring }, taskInstanceId, follow, now);
      return true;
    });
  }
  return (await finishRun({ db, adapter, keyring }, taskInstanceId, held, outcome, terminal, now)) !== null;
}

/**
 * A branch that succeeded: its direct downstream tasks it does not follow, not decided yet, are
 * skipped (their own downstream tasks then follow their trigger rules). Downstream tasks are read
 * from the DAG as serialized (upstream_task_ids), inside the finish's transaction.
 */
async function skipBranchesNotFollowed({ db }: StorageContext, taskInstanceId: number, follow: readonly string[], now: number): Promise<void> {
  const ti = await db.selectFrom('task_instance').select(['dag_id', 'run_id', 'task_id']).where('id', '=', taskInstanceId).executeTakeFirstOrThrow();
  const stored = await db.selectFrom('serialized_dag').select('data').where('dag_id', '=', ti.dag_id).executeTakeFirst();
  const tasks = stored ? (JSON.parse(stored.data) as { dag: { tasks: { task_id: string; upstream_task_ids: string[] }[] } }).dag.tasks : [];
  const notFollowed = tasks.filter((task) => task.upstream_task_ids.includes(ti.task_id) && !follow.includes(task.task_id)).map((task) => task.task_id);
  if (notFollowed.length === 0) return;
  await db
    // transition: branch-skip
    .updateTable('task_instance')
    .set({ state: 'skipped', end_date: toDbTime(now), updated_at: toDbTime(now) })
    .where('dag_id', '=', ti.dag_id)
    .where('run_id', '=', ti.run_id)
    .where('task_id', 'in', notFollowed)
    .where('state', 'is', null)
    .execute();
}

async function finishRun(
  { db, adapter }: StorageContext,
  taskInstanceId: number,
  held: HeldTry,
  outcome: TaskOutcome,
  terminal: readonly TaskInstanceState[],
  now: number,
): Promise<{ tryNumber: number } | null> {
  const row = await db
    // transition: finish
    .updateTable('task_instance')
    .set({
      state: outcome.state,
      end_date: terminal.includes(outcome.state) ? toDbTime(now) : null,
      ready_at: 'readyAt' in outcome ? toDbTime(outcome.readyAt) : null,
      return_value: outcome.state === 'success' && outcome.returnValueJson !== null ? adapter.jsonParam(outcome.returnValueJson) : null,
      next_method: null,
      next_kwargs: null,
      // The event a resumed try ran on stays readable (the status page shows it with what the
      // task returned) until a deferral or a clear replaces it; a fresh try leaves none.
      next_event: sql`case when next_method is null then null else next_event end`,
      worker_job_id: null,
      updated_at: toDbTime(now),
      ...(outcome.state === 'up_for_reschedule' ? { try_number: sql<number>`try_number - 1` } : {}),
    })
    .where('id', '=', taskInstanceId)
    .where('state', '=', 'running')
    .where(stillHeld(held))
    // A signal's stop or restart, asked for while the try ran, wins over its outcome.
    .where('stop_request', 'is', null)
    // Its downstream tasks may be ready now, or (a retry, a reschedule) the scheduler's next
    // ready_at earlier. With the update, not after it: a finish is one round trip.
    .returning(['try_number', wakeForChangedRows(adapter, 'scheduler')])
    .executeTakeFirst();
  return row ? { tryNumber: row.try_number } : null;
}

/**
 * running → scheduled for a worker that is stopping before the task finished (a graceful stop
 * past its grace period, Ctrl-C on standalone). An operator stopping a process is not the task
 * failing, so the try is given back: a fresh run gets the same try number again (try_number - 1),
 * and a resumed run keeps next_method and next_kwargs to resume at the same point (its try_number
 * never went up). Ready at once, for any worker: the other workers are woken in the same
 * statement (PostgreSQL NOTIFY; on SQLite, workers watching the file see the commit). False when
 * it is no longer running on this worker.
 */
export async function handBackTaskInstance({ db, adapter }: StorageContext, taskInstanceId: number, workerJobId: number, now: number): Promise<boolean> {
  const row = await db
    // transition: hand-back
    .updateTable('task_instance')
    .set({
      state: 'scheduled',
      try_number: sql<number>`case when next_method is null then try_number - 1 else try_number end`,
      queued_at: null,
      worker_job_id: null,
      updated_at: toDbTime(now),
    })
    .where('id', '=', taskInstanceId)
    .where('state', '=', 'running')
    .where('worker_job_id', '=', workerJobId)
    .where('stop_request', 'is', null)
    .returning(['id', wakeForChangedRows(adapter, 'worker')])
    .executeTakeFirst();
  return row !== undefined;
}
