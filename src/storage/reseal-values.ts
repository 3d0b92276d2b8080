import { sql } from 'kysely';
import { Keyring, type SealedColumn, type StoredValue } from '../encryption/keyring.ts';
import { EncryptionKeyError } from '../errors.ts';
import type { StorageContext } from './context.ts';
import { sealedFormOf } from './sealed-values.ts';

/** What `db rotate-key` did, by column. */
export interface ResealCounts {
  /** Values now sealed with the first key, that were plain or sealed with another, by column. */
  readonly resealed: Readonly<Record<SealedColumn, number>>;
  /** Values as the first key writes them already: sealed with it, or empty kwargs (kept plain). */
  readonly current: number;
  /** Values that could not be opened (their key is missing or wrong): left as they are. */
  readonly unreadable: readonly string[];
}

const COLUMNS: readonly { table: 'trigger' | 'task_instance'; column: 'kwargs' | 'next_kwargs' | 'next_event'; sealed: SealedColumn; row: string }[] = [
  { table: 'trigger', column: 'kwargs', sealed: 'trigger.kwargs', row: 'trigger' },
  { table: 'task_instance', column: 'next_kwargs', sealed: 'task_instance.next_kwargs', row: 'task instance' },
  { table: 'task_instance', column: 'next_event', sealed: 'task_instance.next_event', row: 'task instance' },
];

/** Rows read and rewritten per transaction: short enough not to hold up the daemons writing beside it. */
const BATCH = 500;

/**
 * Seals every secret-bearing value with the keyring's first key: values sealed with an older key
 * and values written in plain (before encryption was switched on). Safe while daemons run: each
 * row is rewritten only if it still holds the value read (compare-and-set), so a value a daemon
 * changed meanwhile (already sealed with the first key, by then) is left to it.
 */
export async function resealValues({ db, adapter, keyring }: StorageContext): Promise<ResealCounts> {
  const primary = keyring.primaryKeyId;
  if (primary === null)
    throw new EncryptionKeyError('no encryption key is configured: set DEFERFLOW_ENCRYPTION_KEYS or --encryption-keys-file, the new key first');
  const resealed = { 'trigger.kwargs': 0, 'task_instance.next_kwargs': 0, 'task_instance.next_event': 0 } as Record<SealedColumn, number>;
  let current = 0;
  const unreadable: string[] = [];
  for (const { table, column, sealed, row: rowName } of COLUMNS) {
    const form = sealedFormOf(adapter, sealed);
    let after = 0;
    for (;;) {
      const rows = (await db
        .selectFrom(table)
        .select(['id', sql.ref<string>(column).as('value')])
        .where('id', '>', after)
        .where(sql.ref(column), 'is not', null)
        .orderBy('id')
        .limit(BATCH)
        .execute()) as { id: number; value: StoredValue }[];
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.id;
      const rewrites: { id: number; from: StoredValue; to: StoredValue }[] = [];
      for (const { id, value } of rows) {
        if (Keyring.sealedWith(value) === primary) {
          current++;
          continue;
        }
        try {
          const to = keyring.seal(keyring.open(value, sealed, `${rowName} ${id}`), sealed, form);
          // Empty kwargs stay plain (see Keyring): as the first key would write them already.
          if (to === value) current++;
          else rewrites.push({ id, from: value, to });
        } catch (error) {
          if (!(error instanceof EncryptionKeyError)) throw error;
          unreadable.push(error.message);
        }
      }
      if (rewrites.length === 0) continue;
      await db.transaction().execute(async (trx) => {
        for (const { id, from, to } of rewrites) {
          const updated = await trx
            .updateTable(table)
            .set({ [column]: adapter.jsonParam(to) })
            .where('id', '=', id)
            .where(sql.ref(column), '=', adapter.jsonParam(from))
            .executeTakeFirst();
          resealed[sealed] += Number(updated.numUpdatedRows);
        }
      });
    }
  }
  return { resealed, current, unreadable };
}
