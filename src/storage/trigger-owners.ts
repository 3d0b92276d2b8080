import { sql } from 'kysely';
import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { wake } from './wake.ts';
import type { JobLiveness } from './jobs.ts';

/** A triggerer some trigger rows name as their owner, with its job row (null: it has none, pruned or deleted). */
export interface TriggerOwner {
  readonly ownerId: number;
  readonly job: JobLiveness | null;
}

/**
 * Every distinct owner of trigger rows, with what tells whether it lives: one statement, whose
 * owners are found with one index seek each (a loose index scan, written as a recursive query:
 * there are a few owners and up to a million owned rows, which a plain DISTINCT or NOT EXISTS
 * would visit one by one, holding SQLite's synchronous connection the while). Every triggerer
 * runs it each pass.
 */
export async function listTriggerOwners({ db }: StorageContext): Promise<TriggerOwner[]> {
  const { rows } = await sql<{
    owner_id: number;
    job_id: number | null;
    state: string | null;
    end_date: Date | string | null;
    latest_heartbeat: Date | string | null;
    liveness_lock: string | null;
  }>`
    with recursive owners(id) as (
      select min(triggerer_id) from trigger
      union all
      select (select min(next.triggerer_id) from trigger next where next.triggerer_id > owners.id) from owners where owners.id is not null
    )
    select owners.id as owner_id, job.id as job_id, job.state, job.end_date, job.latest_heartbeat, job.liveness_lock
    from owners left join job on job.id = owners.id
    where owners.id is not null`.execute(db);
  return rows.map((row) => ({
    ownerId: Number(row.owner_id),
    job:
      row.job_id === null
        ? null
        : {
            id: Number(row.job_id),
            running: row.state === 'running' && row.end_date === null,
            latestHeartbeat: fromDbTime(row.latest_heartbeat!),
            livenessLock: row.liveness_lock,
          },
  }));
}

/**
 * Unowns the triggers of the given owners (found dead: see services/jobs/liveness.ts), so any live
 * triggerer may claim them, and wakes the triggerers (PostgreSQL NOTIFY; on SQLite the commit
 * wakes the peers watching the file) so they claim them now rather than at their next poll.
 */
export async function releaseTriggersOfOwners({ db, adapter }: StorageContext, ownerIds: readonly number[]): Promise<number> {
  if (ownerIds.length === 0) return 0;
  return db.transaction().execute(async (trx) => {
    const result = await trx.updateTable('trigger').set({ triggerer_id: null }).where(adapter.idIn('triggerer_id', ownerIds)).executeTakeFirst();
    const released = Number(result.numUpdatedRows);
    if (released > 0) await wake(trx, adapter, 'triggerer');
    return released;
  });
}
