import { sql } from '../database/kysely.ts';
import { fromDbTime, toDbTime, type DagRunState, type TaskInstanceState } from '../database/schema.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import { wakeForChangedRows } from './wake.ts';
import type { StorageContext } from './context.ts';

export interface UnfinishedDagRun {
  readonly id: number;
  readonly dagId: string;
  readonly runId: string;
  readonly state: DagRunState;
  readonly logicalDate: number;
  readonly conf: JsonObject;
}

/** Queued and running DAG runs, oldest first. */
export async function listUnfinishedDagRuns({ db }: StorageContext, limit: number): Promise<UnfinishedDagRun[]> {
  const rows = await db
    .selectFrom('dag_run')
    .select(['id', 'dag_id', 'run_id', 'state', 'logical_date', 'conf'])
    .where('state', 'in', ['queued', 'running'])
    .orderBy('logical_date')
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    id: row.id,
    dagId: row.dag_id,
    runId: row.run_id,
    state: row.state,
    logicalDate: fromDbTime(row.logical_date),
    conf: JSON.parse(row.conf) as JsonObject,
  }));
}

export interface RunTaskInstance {
  readonly id: number;
  readonly taskId: string;
  readonly state: TaskInstanceState | null;
}

export async function taskInstancesOfRun({ db }: StorageContext, dagId: string, runId: string): Promise<RunTaskInstance[]> {
  const rows = await db.selectFrom('task_instance').select(['id', 'task_id', 'state']).where('dag_id', '=', dagId).where('run_id', '=', runId).execute();
  return rows.map((row) => ({ id: row.id, taskId: row.task_id, state: row.state }));
}

/**
 * Whether a scheduler pass has anything to decide for a run: a task instance with no state yet
 * (its trigger rule may now be met), or none left unfinished (the run can end). A run whose
 * task instances are all scheduled, running or deferred needs nothing: one aggregate instead of
 * reading every task instance of a large run on every pass.
 */
export async function runNeedsDecisions({ db }: StorageContext, dagId: string, runId: string, finishedStates: readonly TaskInstanceState[]): Promise<boolean> {
  const finished = sql.join(finishedStates.map((state) => sql.lit(state)));
  const row = await db
    .selectFrom('task_instance')
    .select([
      sql<number>`sum(case when state is null then 1 else 0 end)`.as('undecided'),
      sql<number>`sum(case when state is not null and state not in (${finished}) then 1 else 0 end)`.as('unfinished'),
    ])
    .where('dag_id', '=', dagId)
    .where('run_id', '=', runId)
    .executeTakeFirstOrThrow();
  return Number(row.undecided ?? 0) > 0 || Number(row.unfinished ?? 0) === 0;
}

/**
 * Task instances with no state yet go to `state` (scheduled, skipped, upstream_failed, or failed when they cannot start): the
 * scheduler's decision from their trigger rules. Conditional on still having no state, so two
 * schedulers deciding at once change each row once. Returns the ids it changed.
 */
export async function decideTaskInstances(
  { db, adapter }: StorageContext,
  ids: readonly number[],
  state: 'scheduled' | 'skipped' | 'upstream_failed' | 'failed',
  now: number,
): Promise<number[]> {
  if (ids.length === 0) return [];
  const finished = state !== 'scheduled';
  const rows = await db
    // transition: decide
    .updateTable('task_instance')
    .set({ state, updated_at: toDbTime(now), ...(finished ? { end_date: toDbTime(now) } : {}) })
    .where(adapter.idIn('id', ids))
    .where('state', 'is', null)
    // Scheduled ones give workers task instances to claim: woken by the update itself, in its round trip.
    .returning(finished ? ['id'] : ['id', wakeForChangedRows(adapter, 'worker')])
    .execute();
  return rows.map((row) => row.id);
}

/** A queued run starts; a running one ends as success or failed; a finished one is queued again. Conditional on the state it leaves. */
export async function setDagRunState({ db }: StorageContext, dagRunId: number, from: DagRunState, to: DagRunState, now: number): Promise<boolean> {
  const result = await db
    .updateTable('dag_run')
    .set({
      state: to,
      updated_at: toDbTime(now),
      ...(to === 'running' ? { start_date: toDbTime(now) } : {}),
      ...(to === 'success' || to === 'failed' ? { end_date: toDbTime(now) } : {}),
      // Back to queued (its task instances cleared): it is not finished any more.
      ...(to === 'queued' ? { end_date: null } : {}),
    })
    .where('id', '=', dagRunId)
    .where('state', '=', from)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}
