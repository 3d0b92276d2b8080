import type { StorageContext } from './context.ts';

export interface TriggerRow {
  readonly id: number;
  readonly classpath: string;
  readonly kwargs: string;
}

/**
 * Gives up to `limit` unowned triggers that some task instance waits on to triggerer `jobId`, highest priority_weight then oldest
 * first. On PostgreSQL the candidate rows are locked with SKIP LOCKED, so peers claiming at the
 * same moment take disjoint sets without waiting; on SQLite the single write lock does that. The
 * re-check of `triggerer_id is null` keeps the update conditional either way.
 *
 * The candidates are a MATERIALIZED CTE, evaluated once: as an `IN (subquery)` PostgreSQL may run
 * the locking subquery more than once, each run skipping what the last one locked, and so claim
 * more than `limit` rows.
 */
export async function claimTriggers({ db, adapter }: StorageContext, jobId: number, limit: number): Promise<TriggerRow[]> {
  if (limit <= 0) return [];
  const candidates = adapter.lockSkippingLocked(
    db
      .selectFrom('trigger')
      .select('id')
      .where('triggerer_id', 'is', null)
      // An orphan (no task instance waits on it: fired, cleared, or left by a crash) is never
      // run, side effects included; the periodic cleanup deletes it.
      .where(({ exists, selectFrom }) => exists(selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id')))
      .orderBy('priority_weight', 'desc')
      .orderBy('created_at')
      .orderBy('id')
      .limit(limit),
  );
  return db
    .with((cte) => cte('candidate').materialized(), () => candidates)
    .updateTable('trigger')
    .set({ triggerer_id: jobId })
    .where('id', 'in', (eb) => eb.selectFrom('candidate').select('candidate.id'))
    .where('triggerer_id', 'is', null)
    .returning(['id', 'classpath', 'kwargs'])
    .execute();
}
