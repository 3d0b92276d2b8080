import { fromDbTime, type DagRunState, type TaskInstanceState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface RunProgress {
  readonly state: DagRunState;
  /** Task instances per state; `none` counts those with no state yet. */
  readonly counts: Readonly<Partial<Record<TaskInstanceState | 'none', number>>>;
}

/**
 * A DAG run's state and how many of its task instances are in each state (one grouped count,
 * cheap enough to poll); null if no such run.
 */
export async function runProgress({ db }: StorageContext, dagId: string, runId: string): Promise<RunProgress | null> {
  const run = await db.selectFrom('dag_run').select('state').where('dag_id', '=', dagId).where('run_id', '=', runId).executeTakeFirst();
  if (!run) return null;
  const rows = await db
    .selectFrom('task_instance')
    .select((eb) => ['state', eb.fn.countAll<number>().as('count')])
    .where('dag_id', '=', dagId)
    .where('run_id', '=', runId)
    .groupBy('state')
    .execute();
  const counts: Partial<Record<TaskInstanceState | 'none', number>> = {};
  for (const row of rows) counts[row.state ?? 'none'] = Number(row.count);
  return { state: run.state, counts };
}

/** Summed end_date − start_date of a run's finished task instances (deferrals included), ms. */
export async function finishedTaskMs({ db }: StorageContext, dagId: string, runId: string): Promise<number> {
  const rows = await db
    .selectFrom('task_instance')
    .select(['start_date', 'end_date'])
    .where('dag_id', '=', dagId)
    .where('run_id', '=', runId)
    .where('start_date', 'is not', null)
    .where('end_date', 'is not', null)
    .execute();
  return rows.reduce((total, row) => total + fromDbTime(row.end_date!) - fromDbTime(row.start_date!), 0);
}
