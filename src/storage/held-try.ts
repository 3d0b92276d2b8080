import { sql } from '../database/kysely.ts';
import type { Kysely, RawBuilder, Transaction } from 'kysely';
import type { DatabaseSchema, StopRequest, TaskInstanceState } from '../database/schema.ts';
import type { DialectAdapter } from '../database/dialect.ts';

/**
 * The try a worker runs, as starting it gave it: the worker's job and the try's number. A
 * worker's writes of a try (its outcome, its deferral, the stop a signal asked of it) change the
 * task instance only while it is running that very try on that worker. A worker that stopped
 * answering past the zombie threshold (a long pause, a frozen VM, a lost network) has had the
 * try taken from it: the scheduler retried it, on another worker or on this one once it woke.
 * What the old try still writes then finds no row; the job alone would not tell the old try
 * from the one this worker took up again.
 */
export interface HeldTry {
  readonly workerJobId: number;
  readonly tryNumber: number;
}

/** The WHERE condition, beside `state = 'running'`, that a task instance is still `held`. */
export function stillHeld(held: HeldTry): RawBuilder<boolean> {
  return sql<boolean>`(worker_job_id = ${held.workerJobId} and try_number = ${held.tryNumber})`;
}

/**
 * Where a task instance is now, for a worker told its try is no longer held: "running, try 2,
 * on worker 7", "up_for_retry, try 1".
 */
export function describeHolder(row: { readonly state: TaskInstanceState | null; readonly try_number: number; readonly worker_job_id: number | null }): string {
  return `${row.state ?? 'in no state'}, try ${row.try_number}${row.worker_job_id === null ? '' : `, on worker ${row.worker_job_id}`}`;
}

/** A task instance as lockHolder reads it: where it is, and whether `held` still runs it. */
export interface LockedHolder {
  readonly state: TaskInstanceState | null;
  readonly try_number: number;
  readonly worker_job_id: number | null;
  readonly stop_request: StopRequest | null;
  /** Running, on the worker and try held. */
  readonly held: boolean;
}

/**
 * Locks a task instance's row (as a clear, a retry or a response locks it) and says whether the
 * try `held` still runs it: what a try's writes beside its outcome (its state, its question, its
 * wait for input) check first, inside their transaction. Undefined when the row is gone.
 */
export async function lockHolder(
  trx: Kysely<DatabaseSchema> | Transaction<DatabaseSchema>,
  adapter: DialectAdapter,
  taskInstanceId: number,
  held: HeldTry,
): Promise<LockedHolder | undefined> {
  const row = await adapter
    .lockForUpdate(
      trx
        .selectFrom('task_instance')
        .select(['state', 'try_number', 'worker_job_id', 'stop_request', sql<boolean | number>`(state = 'running' and ${stillHeld(held)})`.as('held')])
        .where('id', '=', taskInstanceId),
    )
    .executeTakeFirst();
  // SQLite answers a boolean expression as 0 or 1.
  return row === undefined ? undefined : { ...row, held: Boolean(row.held) };
}
