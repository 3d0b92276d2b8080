import { toDbTime, type DagRunType } from '../database/schema.ts';
import type { SchedulerDag } from '../model/scheduler-dag.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';
import { wake } from './wake.ts';
import { latestSignalVersions } from './signals.ts';

export interface NewDagRun {
  readonly runId: string;
  readonly runType: DagRunType;
  readonly logicalDate: number;
  readonly conf: JsonObject;
  readonly dataInterval?: { readonly start: number; readonly end: number };
}

/**
 * In one transaction: the dag_run row (queued) and a task instance with no state for each of
 * the DAG's tasks. A run whose run id or logical date the DAG already has is not created again
 * (two schedulers, or a repeated trigger, meet at the unique keys): null then.
 */
export async function createDagRun(context: StorageContext, dag: SchedulerDag, run: NewDagRun, now: number): Promise<number | null> {
  return context.db.transaction().execute((trx) => insertDagRun({ ...context, db: trx }, dag, run, now));
}

/** createDagRun's statements, in the caller's transaction (`db` is one). */
export async function insertDagRun(context: StorageContext, dag: SchedulerDag, run: NewDagRun, now: number): Promise<number | null> {
  return (await insertDagRuns(context, dag, [run], now)).get(run.runId) ?? null;
}

/** Rows per multi-row INSERT: well inside either dialect's limit on bound parameters (SQLite's 32,766). */
const ROWS_PER_INSERT = 500;

/**
 * Several runs of one DAG at once, in the caller's transaction, a few statements in all rather
 * than a few per run (a watcher's batch): the dag_run rows, then the task instances of those made.
 * Returns the ids of the runs made, by run id; a run whose run id or logical date the DAG has
 * already is left out, as createDagRun leaves it.
 */
export async function insertDagRuns(
  { db: trx, adapter, keyring }: StorageContext,
  dag: SchedulerDag,
  runs: readonly NewDagRun[],
  now: number,
): Promise<Map<string, number>> {
  const made = new Map<string, number>();
  for (let at = 0; at < runs.length; at += ROWS_PER_INSERT) {
    const rows = await trx
      .insertInto('dag_run')
      .values(
        runs.slice(at, at + ROWS_PER_INSERT).map((run) => ({
          dag_id: dag.dagId,
          run_id: run.runId,
          run_type: run.runType,
          logical_date: toDbTime(run.logicalDate),
          data_interval_start: run.dataInterval ? toDbTime(run.dataInterval.start) : null,
          data_interval_end: run.dataInterval ? toDbTime(run.dataInterval.end) : null,
          state: 'queued' as const,
          conf: adapter.jsonParam(JSON.stringify(run.conf)),
          dag_hash: dag.hash,
          created_at: toDbTime(now),
          updated_at: toDbTime(now),
        })),
      )
      .onConflict((conflict) => conflict.doNothing())
      .returning(['id', 'run_id'])
      .execute();
    for (const row of rows) made.set(row.run_id, row.id);
  }
  if (made.size === 0) return made;
  if (dag.tasks.length > 0) {
    const taskInstances = [...made.keys()].flatMap((runId) =>
      dag.tasks.map((task) => ({
        dag_id: dag.dagId,
        task_id: task.taskId,
        run_id: runId,
        state: null,
        operator: task.operator,
        max_tries: task.retry.retries,
        priority_weight: task.priorityWeight,
        queue: task.queue,
        updated_at: toDbTime(now),
      })),
    );
    const created: { id: number; task_id: string; run_id: string }[] = [];
    for (let at = 0; at < taskInstances.length; at += ROWS_PER_INSERT) {
      created.push(
        ...(await trx
          // transition: create-run
          .insertInto('task_instance')
          .values(taskInstances.slice(at, at + ROWS_PER_INSERT))
          .returning(['id', 'task_id', 'run_id'])
          .execute()),
      );
    }
    if (dag.tasks.some((task) => task.signalActions.length > 0))
      for (const runId of made.keys())
        await recordSignalBaselines(
          { db: trx, adapter, keyring },
          dag,
          created.filter((row) => row.run_id === runId),
        );
  }
  await wake(trx, adapter, 'scheduler');
  return made;
}

/**
 * For each task that declares signal actions, the version of each of its keys its actions have
 * taken into account: the key's latest now, so only signals sent after the run was created act.
 */
async function recordSignalBaselines(context: StorageContext, dag: SchedulerDag, created: readonly { id: number; task_id: string }[]): Promise<void> {
  const withActions = dag.tasks.filter((task) => task.signalActions.length > 0);
  if (withActions.length === 0) return;
  const latest = await latestSignalVersions(context, [...new Set(withActions.flatMap((task) => task.signalActions.map((action) => action.key)))]);
  const idOf = new Map(created.map((row) => [row.task_id, row.id]));
  const rows = withActions.flatMap((task) =>
    task.signalActions.map((action) => ({ task_instance_id: idOf.get(task.taskId)!, signal_key: action.key, version: latest.get(action.key) ?? 0 })),
  );
  await context.db.insertInto('task_instance_signal').values(rows).execute();
}
