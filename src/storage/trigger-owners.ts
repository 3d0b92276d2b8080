import { sql } from '../database/kysely.ts';
import type { StorageContext } from './context.ts';
import { wake } from './wake.ts';
import { jobLivenessOf, type JobHolder } from './jobs.ts';
import type { OwnedDigest } from './owned-triggers.ts';

/** What a triggerer's pass reads first: who owns trigger rows, and a digest of its own. */
export interface TriggerOwnership {
  /** Every distinct owner (a triggerer's job id), with what tells whether it lives. */
  readonly owners: readonly JobHolder[];
  /** The count and id sum of the rows `jobId` owns, to hold against what its runner holds. */
  readonly own: OwnedDigest;
}

/**
 * Every distinct owner of trigger rows, with what tells whether it lives, and the digest of the
 * rows `jobId` owns: one statement, whose owners are found with one index seek each (a loose index
 * scan, written as a recursive query: there are a few owners and up to a million owned rows, which
 * a plain DISTINCT or NOT EXISTS would visit one by one, holding SQLite's synchronous connection
 * the while). Every triggerer runs it each pass; the digest saves the pass a statement.
 */
export async function readTriggerOwnership({ db }: StorageContext, jobId: number): Promise<TriggerOwnership> {
  const { rows } = await sql<{
    own_count: number | string;
    own_sum: number | string | null;
    owner_id: number | null;
    job_id: number | null;
    state: string | null;
    end_date: Date | string | null;
    latest_heartbeat: Date | string | null;
    liveness_lock: string | null;
  }>`
    with recursive owners(id) as (
      -- "is not null" lets the partial index on triggerer_id answer (without it SQLite scanned
      -- every row: 174 ms a pass at a million triggers, holding the loop).
      select min(triggerer_id) from trigger where triggerer_id is not null
      union all
      select (select min(next.triggerer_id) from trigger next where next.triggerer_id > owners.id) from owners where owners.id is not null
    ),
    own as (select count(*) as own_count, coalesce(sum(id), 0) as own_sum from trigger where triggerer_id = ${jobId})
    select own.own_count, own.own_sum, listed.owner_id, listed.job_id, listed.state, listed.end_date, listed.latest_heartbeat, listed.liveness_lock
    from own left join (
      select owners.id as owner_id, job.id as job_id, job.state, job.end_date, job.latest_heartbeat, job.liveness_lock
      from owners left join job on job.id = owners.id
      where owners.id is not null
    ) listed on 1 = 1`.execute(db);
  const owners = rows.flatMap((row) => (row.owner_id === null ? [] : [{ id: Number(row.owner_id), job: jobLivenessOf(row) }]));
  return { owners, own: { count: Number(rows[0]?.own_count ?? 0), idSum: Number(rows[0]?.own_sum ?? 0) } };
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
