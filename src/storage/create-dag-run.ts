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
export async function insertDagRun({ db: trx, adapter, keyring }: StorageContext, dag: SchedulerDag, run: NewDagRun, now: number): Promise<number | null> {
  const inserted = await trx
    .insertInto('dag_run')
    .values({
      dag_id: dag.dagId,
      run_id: run.runId,
      run_type: run.runType,
      logical_date: toDbTime(run.logicalDate),
      data_interval_start: run.dataInterval ? toDbTime(run.dataInterval.start) : null,
      data_interval_end: run.dataInterval ? toDbTime(run.dataInterval.end) : null,
      state: 'queued',
      conf: adapter.jsonParam(JSON.stringify(run.conf)),
      dag_hash: dag.hash,
      created_at: toDbTime(now),
      updated_at: toDbTime(now),
    })
    .onConflict((conflict) => conflict.doNothing())
    .returning('id')
    .executeTakeFirst();
  if (!inserted) return null;
  if (dag.tasks.length > 0) {
    const created = await trx
      // transition: create-run
      .insertInto('task_instance')
      .values(
        dag.tasks.map((task) => ({
          dag_id: dag.dagId,
          task_id: task.taskId,
          run_id: run.runId,
          state: null,
          operator: task.operator,
          max_tries: task.retry.retries,
          priority_weight: task.priorityWeight,
          queue: task.queue,
          updated_at: toDbTime(now),
        })),
      )
      .returning(['id', 'task_id'])
      .execute();
    await recordSignalBaselines({ db: trx, adapter, keyring }, dag, created);
  }
  await wake(trx, adapter, 'scheduler');
  return inserted.id;
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
