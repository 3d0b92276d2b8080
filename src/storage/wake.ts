import type { AliasedRawBuilder, Kysely, Transaction } from 'kysely';
import type { DatabaseSchema } from '../database/schema.ts';
import { WAKE_CHANNEL } from '../database/notification-hub.ts';
import type { DialectAdapter } from '../database/dialect.ts';

/**
 * Which daemons a write gives work to: a new trigger to claim, a task instance to run, a state to
 * decide on, a running try a signal asks its worker to stop (a topic of its own: every scheduled
 * task instance wakes the workers, and a worker with tries running need not look for stop
 * requests each time).
 */
export type WakeTopic = 'triggerer' | 'worker' | 'scheduler' | 'stop-request';

/**
 * Pushes a wake-up to the daemons of `topics` when `db`'s transaction commits (PostgreSQL NOTIFY;
 * nothing on SQLite, where they poll, and standalone wakes its own components in-process). A
 * hint only: each daemon still finds its work by querying.
 */
export async function wake(db: Kysely<DatabaseSchema> | Transaction<DatabaseSchema>, adapter: DialectAdapter, ...topics: WakeTopic[]): Promise<void> {
  if (!adapter.supportsNotify) return;
  for (const topic of new Set(topics)) await adapter.notify(db, WAKE_CHANNEL, topic);
}

/**
 * A column for the RETURNING list of a statement that gives `topic`'s daemons work with each row
 * it changes: the same wake-up as `wake`, in the statement's own round trip, and only when it
 * changed a row. For a statement run on its own, where `wake` would cost a round trip of its own.
 */
export function wakeForChangedRows(adapter: DialectAdapter, topic: WakeTopic): AliasedRawBuilder<unknown, 'woke'> {
  return adapter.notifyExpression(WAKE_CHANNEL, topic).as('woke');
}
