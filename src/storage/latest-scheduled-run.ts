import { sql } from '../database/kysely.ts';
import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** The logical date of a DAG's latest scheduled run (the next interval starts where its ended); null if it has none. */
export async function latestScheduledLogicalDate({ db }: StorageContext, dagId: string): Promise<number | null> {
  const row = await db
    .selectFrom('dag_run')
    .select('logical_date')
    .where('dag_id', '=', dagId)
    .where('run_type', '=', 'scheduled')
    .orderBy('logical_date', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row ? fromDbTime(row.logical_date) : null;
}

/** The run id of a DAG's run for a signal version (a DAG scheduled on a signal key). */
export function signalRunId(version: number): string {
  return `signal__${version}`;
}

/**
 * The highest signal version a DAG scheduled on a signal has a run for; null if it has none.
 * Read from its latest runs by logical date (a signal run's is its send time, which rises with
 * the version).
 */
export async function latestSignalRunVersion({ db }: StorageContext, dagId: string): Promise<number | null> {
  const rows = await db
    .selectFrom('dag_run')
    .select('run_id')
    .where('dag_id', '=', dagId)
    .where('run_type', '=', 'scheduled')
    .where('run_id', 'like', 'signal__%')
    .orderBy('logical_date', 'desc')
    .limit(20)
    .execute();
  const versions = rows.flatMap((row) => {
    const match = /^signal__(\d+)$/.exec(row.run_id);
    return match ? [Number(match[1])] : [];
  });
  return versions.length === 0 ? null : Math.max(...versions);
}

/**
 * Where a DAG scheduled on `key` without a startDate starts, before its first run: after the
 * key's latest version when a scheduler first saw it. Recorded the first time and read after,
 * so every scheduler, and a restarted one, agrees; a DAG moved to another key starts afresh.
 */
export async function signalScheduleStart({ db }: StorageContext, dagId: string, key: string): Promise<number> {
  const latest = db.selectFrom('signal_key').select('version').where('key', '=', key);
  const latestOrNone = sql<number>`coalesce((${latest}), 0)`;
  await db
    .insertInto('dag_signal_start')
    .values({ dag_id: dagId, signal_key: key, after_version: latestOrNone })
    .onConflict((conflict) => conflict.column('dag_id').doNothing())
    .execute();
  await db
    .updateTable('dag_signal_start')
    .set({ signal_key: key, after_version: latestOrNone })
    .where('dag_id', '=', dagId)
    .where('signal_key', '!=', key)
    .execute();
  const row = await db.selectFrom('dag_signal_start').select('after_version').where('dag_id', '=', dagId).executeTakeFirstOrThrow();
  return Number(row.after_version);
}
