import { wake } from './wake.ts';
import type { StorageContext } from './context.ts';
import type { EncryptionKeyError } from '../vocabulary/errors.ts';
import { openTriggerRows } from './sealed-values.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';
import { DEFAULT_QUEUES, type QueueSet } from '../model/queues.ts';
import { inQueue, inQueues } from './queue-filter.ts';
import { fromDbTime } from '../database/schema.ts';
import { activelyWatched } from './active-watcher.ts';

export interface TriggerRow {
  readonly id: number;
  readonly classpath: string;
  /** JSON text (opened, if it was encrypted). */
  readonly kwargs: string;
  /** Its kwargs could not be decrypted: the trigger cannot run, and its task instances fail with this. */
  readonly unreadable?: EncryptionKeyError;
  /** 1: a watcher (DAGs are scheduled on it: it runs on, each event making runs); 0 or absent: a wait. */
  readonly watcher?: number;
  /** A watcher's durable cursor (JSON text), null before its first event. */
  readonly cursor?: string | null;
}

export interface ClaimResult {
  /** How many triggers are now owned by the claiming triggerer. */
  readonly claimed: number;
  /**
   * Their rows, kwargs opened. A separate promise because a large batch of encrypted kwargs is
   * opened on the keyring's thread: the claimer can send its next claim meanwhile.
   */
  readonly rows: Promise<TriggerRow[]>;
  /** Unowned rows looked at: fewer than asked for means no more were waiting. */
  readonly examined: number;
  /** Orphans among them (no task instance waits on them), deleted instead of claimed. */
  readonly orphansDeleted: number;
}

/**
 * Gives up to `limit` unowned triggers to triggerer `jobId`, highest priority_weight then oldest
 * first, in one transaction:
 * 1. the candidates: the next `limit` unowned rows, locked with SKIP LOCKED on PostgreSQL, so
 *    peers claiming at the same moment take disjoint sets without waiting (on SQLite the single
 *    write lock does that);
 * 2. those some task instance waits on (or a composite wait, as a member that has not fired
 *    into it) become owned (conditional on still being unowned);
 * 3. the others are orphans (fired, cleared, or left by a triggerer that died between moving its
 *    task instances and deleting the rows): they are deleted, never run, side effects included,
 *    and so never hold up the claims behind them.
 *
 * The candidates are fetched first rather than filtered in one statement: the wait check then
 * costs one index probe per candidate, where a filter inside the ordered scan would probe every
 * unowned row for each claim (100,000 triggers claimed 1,000 at a time: five million probes).
 * It is a scalar subquery with a LIMIT, not EXISTS, so PostgreSQL cannot plan it as a semi-join
 * over every task instance. `wakePeers`: a claim that took anything wakes the triggerers.
 * `queues`: only rows in these queues are candidates (see queue-filter.ts), `default` if not given.
 */
export async function claimTriggers(
  { db, adapter, keyring }: StorageContext,
  jobId: number,
  limit: number,
  { wakePeers = false, queues = DEFAULT_QUEUES }: { readonly wakePeers?: boolean; readonly queues?: QueueSet } = {},
): Promise<ClaimResult> {
  const none: ClaimResult = { claimed: 0, rows: Promise.resolve([]), examined: 0, orphansDeleted: 0 };
  if (limit <= 0) return none;
  // Row locks must hold from the candidates' SELECT to the UPDATE, so PostgreSQL needs the
  // transaction; SQLite has none to hold, and a transaction there would queue for the write lock
  // behind every inserting transaction before even reading (the UPDATE and DELETE are each
  // conditional, so a peer claiming in between takes nothing twice).
  const run = <T>(work: (trx: StorageContext['db']) => Promise<T>): Promise<T> => (adapter.supportsRowLocks ? db.transaction().execute(work) : work(db));
  // An idle triggerer's every pass comes here: one plain read when nothing waits, not a
  // transaction of three statements.
  if (
    adapter.supportsRowLocks &&
    !(await db
      .selectFrom('trigger')
      .select('id')
      .where('triggerer_id', 'is', null)
      .where('quarantined_at', 'is', null)
      .where(inQueues(queues))
      .limit(1)
      .executeTakeFirst())
  ) {
    return none;
  }
  const result = await run(async (trx) => {
    const candidates: { id: number; priority_weight: number; created_at: Date | string }[] = [];
    // One queue's first `limit` rows at a time, each an index range in claim order.
    for (const queue of queues) {
      candidates.push(
        ...(await adapter
          .lockSkippingLocked(
            trx
              .selectFrom('trigger')
              .select(['id', 'priority_weight', 'created_at'])
              .where('triggerer_id', 'is', null)
              // A quarantined trigger is never run again (see quarantine-triggers.ts).
              .where('quarantined_at', 'is', null)
              .where(inQueue(queue))
              .orderBy('priority_weight', 'desc')
              .orderBy('created_at')
              .orderBy('id')
              .limit(limit),
          )
          .execute()),
      );
    }
    if (candidates.length === 0) return { claimed: [], examined: 0, orphansDeleted: 0 };
    // Serving several queues: the best `limit` of them all (the rest are unlocked at commit).
    if (candidates.length > limit) {
      const at = (row: (typeof candidates)[number]) => fromDbTime(row.created_at);
      candidates.sort((a, b) => b.priority_weight - a.priority_weight || at(a) - at(b) || a.id - b.id);
      candidates.length = limit;
    }
    const ids = candidates.map((candidate) => candidate.id);
    const claimed = await trx
      .updateTable('trigger')
      .set({ triggerer_id: jobId })
      .where(adapter.idIn('id', ids))
      .where('triggerer_id', 'is', null)
      .where('quarantined_at', 'is', null)
      .where((eb) =>
        eb.or([
          eb(eb.selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id').limit(1), 'is not', null),
          // A member of a composite wait that has not fired into it (see composite-trigger.ts).
          eb.exists(
            eb
              .selectFrom('trigger_member')
              .select('trigger_member.id')
              .whereRef('trigger_member.member_id', '=', 'trigger.id')
              .where('trigger_member.outcome', 'is', null),
          ),
          // A watcher a DAG is scheduled on, not paused nor deleted (see sync-dag-watchers.ts).
          activelyWatched(eb),
        ]),
      )
      .returning(['id', 'classpath', 'kwargs', 'watcher', 'cursor'])
      .execute();
    // With its commit (PostgreSQL): the peers read the new owner at once (see the triggerer's pass).
    if (wakePeers && claimed.length > 0) await wake(trx, adapter, 'triggerer');
    let orphansDeleted = 0;
    if (claimed.length < ids.length) {
      const owned = new Set(claimed.map((row) => row.id));
      orphansDeleted = await deleteUnusedTriggers(
        { db: trx, adapter, keyring },
        ids.filter((id) => !owned.has(id)),
      );
    }
    return { claimed, examined: ids.length, orphansDeleted };
  });
  // Decrypted after the transaction, which need not hold its row locks meanwhile.
  return { claimed: result.claimed.length, rows: openTriggerRows(keyring, result.claimed), examined: result.examined, orphansDeleted: result.orphansDeleted };
}
