import { fromDbTime, type DagRunState, type TaskInstanceState } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

export interface RunProgress {
  readonly state: DagRunState;
  /** Task instances per state; `none` counts those with no state yet. */
  readonly counts: Readonly<Partial<Record<TaskInstanceState | 'none', number>>>;
  /** Summed end_date − start_date of finished task instances (deferrals included), ms. */
  readonly finishedTaskMs: number;
}

/** A DAG run's state and how many of its task instances are in each state; null if no such run. */
export async function runProgress({ db }: StorageContext, dagId: string, runId: string): Promise<RunProgress | null> {
  const run = await db.selectFrom('dag_run').select('state').where('dag_id', '=', dagId).where('run_id', '=', runId).executeTakeFirst();
  if (!run) return null;
  const rows = await db
    .selectFrom('task_instance')
    .select(['state', 'start_date', 'end_date'])
    .where('dag_id', '=', dagId)
    .where('run_id', '=', runId)
    .execute();
  const counts: Partial<Record<TaskInstanceState | 'none', number>> = {};
  let finishedTaskMs = 0;
  for (const row of rows) {
    const key = row.state ?? 'none';
    counts[key] = (counts[key] ?? 0) + 1;
    if (row.start_date !== null && row.end_date !== null) finishedTaskMs += fromDbTime(row.end_date) - fromDbTime(row.start_date);
  }
  return { state: run.state, counts, finishedTaskMs };
}
