import { sql } from '../database/kysely.ts';
import type { ExpressionBuilder } from 'kysely';
import { toDbTime, type DatabaseSchema } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { pruneSignals } from './signals.ts';

/** What a clean removed (or, dry, would remove), by kind of row. */
export interface CleanCounts {
  /** Finished DAG runs, with their task instances (their logs, reschedules, state history and signal marks go with them). */
  readonly dagRuns: number;
  readonly taskInstances: number;
  /** Task log lines of the task instances kept. */
  readonly taskLogLines: number;
  /** Trigger log lines (kept by trigger id, whatever became of the trigger). */
  readonly triggerLogLines: number;
  /** Signals, each key's latest kept. */
  readonly signals: number;
  /** Job rows of processes that ended. */
  readonly jobs: number;
  /** Audit log entries. */
  readonly auditEntries: number;
  /** Daemons' samples (the charts' figures). */
  readonly samples: number;
}

class DryRun extends Error {
  constructor(readonly counts: CleanCounts) {
    super('dry run');
  }
}

/**
 * Airflow's `db clean`: deletes what finished before `before` (epoch ms), in one transaction
 * (rolled back when `dryRun`, after counting). Kept whatever its age: unfinished DAG runs; each
 * DAG's latest scheduled run (the scheduler reads where the next interval, or signal version,
 * starts from it); each signal key's latest signal; job rows still running.
 */
export async function cleanDatabase({ db, adapter, keyring }: StorageContext, before: number, dryRun: boolean): Promise<CleanCounts> {
  const cutoff = toDbTime(before);
  try {
    return await db.transaction().execute(async (trx) => {
      const latestScheduled = trx
        .selectFrom('dag_run as latest')
        .select('latest.id')
        .where('latest.run_type', '=', 'scheduled')
        .where(
          'latest.logical_date',
          '=',
          sql<string>`(select max(d.logical_date) from dag_run d where d.dag_id = latest.dag_id and d.run_type = 'scheduled')`,
        );
      const oldRuns = await trx
        .selectFrom('dag_run')
        .select('id')
        .where('state', 'in', ['success', 'failed'])
        .where('end_date', '<', cutoff)
        .where('id', 'not in', latestScheduled)
        .execute();
      const runIds = oldRuns.map((run) => run.id);
      let taskInstances = 0;
      let dagRuns = 0;
      if (runIds.length > 0) {
        // One statement for the task instances of every run (not one per run), their state
        // history first (no foreign key takes it with them: see migration 0019).
        const ofOldRuns = ({ exists, selectFrom }: ExpressionBuilder<DatabaseSchema, 'task_instance'>) =>
          exists(
            selectFrom('dag_run')
              .select('dag_run.id')
              .whereRef('dag_run.dag_id', '=', 'task_instance.dag_id')
              .whereRef('dag_run.run_id', '=', 'task_instance.run_id')
              .where(adapter.idIn('dag_run.id', runIds)),
          );
        await trx
          .deleteFrom('task_instance_history')
          .where('task_instance_id', 'in', (eb) => eb.selectFrom('task_instance').select('task_instance.id').where(ofOldRuns))
          .execute();
        const deleted = await trx.deleteFrom('task_instance').where(ofOldRuns).executeTakeFirst();
        taskInstances = Number(deleted.numDeletedRows);
        dagRuns = Number((await trx.deleteFrom('dag_run').where(adapter.idIn('id', runIds)).executeTakeFirst()).numDeletedRows);
      }
      const taskLogLines = Number((await trx.deleteFrom('task_log').where('logged_at', '<', cutoff).executeTakeFirst()).numDeletedRows);
      const triggerLogLines = Number((await trx.deleteFrom('trigger_log').where('logged_at', '<', cutoff).executeTakeFirst()).numDeletedRows);
      const signals = await pruneSignals({ db: trx, adapter, keyring }, before);
      const jobs = Number(
        (await trx.deleteFrom('job').where('state', '!=', 'running').where('end_date', 'is not', null).where('end_date', '<', cutoff).executeTakeFirst())
          .numDeletedRows,
      );
      const auditEntries = Number((await trx.deleteFrom('audit_log').where('at', '<', cutoff).executeTakeFirst()).numDeletedRows);
      const samples = Number((await trx.deleteFrom('daemon_sample').where('at', '<', cutoff).executeTakeFirst()).numDeletedRows);
      const counts = { dagRuns, taskInstances, taskLogLines, triggerLogLines, signals, jobs, auditEntries, samples };
      if (dryRun) throw new DryRun(counts);
      return counts;
    });
  } catch (error) {
    if (error instanceof DryRun) return error.counts;
    throw error;
  }
}
