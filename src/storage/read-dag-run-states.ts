import { fromDbTime, toDbTime, type TaskInstanceState } from '../database/schema.ts';
import type { DagRunStates, DagRunStatesKey } from '../model/dag-run-states.ts';
import type { StorageContext } from './context.ts';

/**
 * The states of many DAG runs and of some of their task instances, in two queries whatever the
 * number of runs (the callers batch, see DagRunStateBatcher): the runs by their unique
 * (dag_id, logical_date), then the wanted task instances through the (dag_id, run_id, task_id)
 * key. Runs that do not exist are left out.
 */
export async function readDagRunStates({ db }: StorageContext, keys: readonly DagRunStatesKey[]): Promise<DagRunStates[]> {
  if (keys.length === 0) return [];
  const runs = await db
    .selectFrom('dag_run')
    .select(['dag_id', 'run_id', 'logical_date', 'state'])
    .where((eb) => eb.or(keys.map((key) => eb.and([eb('dag_id', '=', key.dagId), eb('logical_date', '=', toDbTime(key.logicalDate))]))))
    .execute();
  const wanted = new Map<string, Set<string>>();
  for (const key of keys) {
    const runKey = `${key.dagId}\n${key.logicalDate}`;
    const ids = wanted.get(runKey) ?? new Set<string>();
    for (const taskId of key.taskIds) ids.add(taskId);
    wanted.set(runKey, ids);
  }
  const found = runs.map((run) => ({ run, taskIds: [...(wanted.get(`${run.dag_id}\n${fromDbTime(run.logical_date)}`) ?? [])] }));
  const withTasks = found.filter(({ taskIds }) => taskIds.length > 0);
  const states = new Map<string, Record<string, (TaskInstanceState | null)[]>>();
  if (withTasks.length > 0) {
    const rows = await db
      .selectFrom('task_instance')
      .select(['dag_id', 'run_id', 'task_id', 'state'])
      .where((eb) =>
        eb.or(withTasks.map(({ run, taskIds }) => eb.and([eb('dag_id', '=', run.dag_id), eb('run_id', '=', run.run_id), eb('task_id', 'in', taskIds)]))),
      )
      .orderBy('map_index')
      .execute();
    for (const row of rows) {
      const runKey = `${row.dag_id}\n${row.run_id}`;
      const byTask = states.get(runKey) ?? {};
      const taskStates = byTask[row.task_id] ?? [];
      taskStates.push(row.state);
      byTask[row.task_id] = taskStates;
      states.set(runKey, byTask);
    }
  }
  return found.map(({ run }) => ({
    dagId: run.dag_id,
    logicalDate: new Date(fromDbTime(run.logical_date)).toISOString(),
    runId: run.run_id,
    state: run.state,
    taskStates: states.get(`${run.dag_id}\n${run.run_id}`) ?? {},
  }));
}
