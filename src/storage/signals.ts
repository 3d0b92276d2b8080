import { sql } from '../database/kysely.ts';
import type { SqlBool } from 'kysely';
import { fromDbTime, toDbTime } from '../database/schema.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import type { Signal } from '../model/signal.ts';
import type { StorageContext } from './context.ts';
import { SIGNAL_CHANNEL } from '../database/notification-hub.ts';

/**
 * Sends a signal: the key's next version (1 for its first send) and the value, in one transaction.
 * The upsert on signal_key holds the key's row until commit, so versions of one key commit in
 * order: a reader that saw version n never later finds a version below n appear.
 */
export async function sendSignal({ db, adapter }: StorageContext, key: string, valueJson: string, now: number, sentBy: string | null = null): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const row = await trx
      .insertInto('signal_key')
      .values({ key, version: 1, updated_at: toDbTime(now) })
      .onConflict((conflict) => conflict.column('key').doUpdateSet({ version: sql`signal_key.version + 1`, updated_at: toDbTime(now) }))
      .returning('version')
      .executeTakeFirstOrThrow();
    const version = Number(row.version);
    await trx
      .insertInto('signal')
      .values({ key, version, value: adapter.jsonParam(valueJson), sent_at: toDbTime(now), sent_by: sentBy })
      .execute();
    await adapter.notify(trx, SIGNAL_CHANNEL, `${version} ${key}`);
    return version;
  });
}

/** Each key's latest version; a key never sent is absent. */
export async function latestSignalVersions({ db }: StorageContext, keys: readonly string[]): Promise<Map<string, number>> {
  if (keys.length === 0) return new Map();
  const rows = await db
    .selectFrom('signal_key')
    .select(['key', 'version'])
    .where('key', 'in', [...keys])
    .execute();
  return new Map(rows.map((row) => [row.key, Number(row.version)]));
}

/** The keys most recently sent on, newest first, with their latest version and when it was sent (epoch ms). */
export async function recentSignalKeys({ db }: StorageContext, limit: number): Promise<{ key: string; version: number; sentAt: number }[]> {
  const rows = await db.selectFrom('signal_key').select(['key', 'version', 'updated_at']).orderBy('updated_at', 'desc').orderBy('key').limit(limit).execute();
  return rows.map((row) => ({ key: row.key, version: Number(row.version), sentAt: fromDbTime(row.updated_at) }));
}

/** A key's latest `limit` signals, newest first. */
export async function listSignalVersions({ db }: StorageContext, key: string, limit: number): Promise<SignalVersion[]> {
  const rows = await db
    .selectFrom('signal')
    .select(['key', 'version', 'value', 'sent_at', 'sent_by'])
    .where('key', '=', key)
    .orderBy('version', 'desc')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    key: row.key,
    version: Number(row.version),
    value: JSON.parse(row.value) as JsonValue,
    sentAt: fromDbTime(row.sent_at),
    sentBy: row.sent_by,
  }));
}

/** A signal as a key's history shows it: with who sent it. */
export interface SignalVersion extends Signal {
  /** Who sent it (an operator and from where, a client's address, a task); null: not recorded. */
  readonly sentBy: string | null;
}

/**
 * The signals of each key after its version, oldest first per key, at most `limit` in all (the
 * caller asks again from where it got to). What a listener catching up, or a poll, reads.
 */
export async function signalsAfter({ db, adapter }: StorageContext, after: ReadonlyMap<string, number>, limit: number): Promise<Signal[]> {
  if (after.size === 0) return [];
  // The keys a triggerer listens to, joined as one parameter: thousands of them (a signal each
  // of thousands of tasks waits on) as an OR of pairs outgrew SQLite's expression depth.
  const rows = await db
    .selectFrom('signal')
    .innerJoin(adapter.keyVersionPairs([...after]).as('after'), (join) =>
      join.onRef('after.key', '=', 'signal.key').on(sql<SqlBool>`signal.version > after.version`),
    )
    .select(['signal.key', 'signal.version', 'signal.value', 'signal.sent_at'])
    .orderBy('signal.key')
    .orderBy('signal.version')
    .limit(limit)
    .execute();
  return rows.map((row) => ({ key: row.key, version: Number(row.version), value: JSON.parse(row.value) as JsonValue, sentAt: fromDbTime(row.sent_at) }));
}

/** Deletes signals sent before `before` (epoch ms), keeping each key's latest; returns how many went. */
export async function pruneSignals({ db }: StorageContext, before: number): Promise<number> {
  const result = await db
    .deleteFrom('signal')
    .where('sent_at', '<', toDbTime(before))
    .where((eb) => eb('version', '<', eb.selectFrom('signal_key').select('signal_key.version').whereRef('signal_key.key', '=', 'signal.key')))
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
