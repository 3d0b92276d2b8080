import { fromDbTime, toDbTime, type DagRunState, type DagRunType } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface DagRunRow {
  readonly dagId: string;
  readonly runId: string;
  readonly runType: DagRunType;
  readonly state: DagRunState;
  readonly logicalDate: number;
  readonly startDate: number | null;
  readonly endDate: number | null;
}

/** One DAG run's id and state, or null. */
export async function findDagRun({ db }: StorageContext, dagId: string, runId: string): Promise<{ id: number; state: DagRunState } | null> {
  const row = await db.selectFrom('dag_run').select(['id', 'state']).where('dag_id', '=', dagId).where('run_id', '=', runId).executeTakeFirst();
  return row ?? null;
}

/** Which DAG runs listDagRuns returns: at most `limit`, of one DAG, in one state, for moments from `since` (epoch ms) on. */
export interface DagRunFilter {
  readonly dagId?: string;
  readonly state?: DagRunState;
  readonly since?: number;
  readonly limit: number;
}

/** DAG runs, newest logical date first, filtered (see DagRunFilter). */
export async function listDagRuns({ db }: StorageContext, filter: DagRunFilter): Promise<DagRunRow[]> {
  let query = db
    .selectFrom('dag_run')
    .select(['dag_id', 'run_id', 'run_type', 'state', 'logical_date', 'start_date', 'end_date'])
    .orderBy('logical_date', 'desc')
    .orderBy('id', 'desc')
    .limit(filter.limit);
  if (filter.dagId !== undefined) query = query.where('dag_id', '=', filter.dagId);
  if (filter.state !== undefined) query = query.where('state', '=', filter.state);
  if (filter.since !== undefined) query = query.where('logical_date', '>=', toDbTime(filter.since));
  return (await query.execute()).map((row) => ({
    dagId: row.dag_id,
    runId: row.run_id,
    runType: row.run_type,
    state: row.state,
    logicalDate: fromDbTime(row.logical_date),
    startDate: fromDbTime(row.start_date),
    endDate: fromDbTime(row.end_date),
  }));
}
