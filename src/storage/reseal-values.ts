import { sql } from '../database/kysely.ts';
import { Keyring, type SealedColumn, type StoredValue } from '../database/encryption/keyring.ts';
import { EncryptionKeyError } from '../vocabulary/errors.ts';
import type { StorageContext } from './context.ts';
import { SEALABLE_COLUMNS, sealedFormOf } from './sealed-values.ts';

/** What `db rotate-key` did, by column. */
export interface ResealCounts {
  /** Values now sealed with the first key, that were plain or sealed with another, by column. */
  readonly resealed: Readonly<Record<SealedColumn, number>>;
  /** Values as the first key writes them already: sealed with it (and opened with it), or empty kwargs (kept plain). */
  readonly current: number;
  /**
   * Values that could not be opened (their key is missing or wrong), each named by its row. When
   * the first pass finds any, nothing is written; one a daemon wrote during the rewrite is left.
   */
  readonly unreadable: readonly string[];
  /** The first pass found unreadable values, so nothing was written. */
  readonly stoppedBeforeWriting: boolean;
}

/** Rows read and rewritten per transaction: short enough not to hold up the daemons writing beside it. */
const BATCH = 500;

/**
 * Seals every secret-bearing value with the keyring's first key: values sealed with an older key
 * and values written in plain (before encryption was switched on). Run after
 * verifyEncryptionKeys, which refuses a key whose id the database knows under other material.
 *
 * Two passes. The first opens every value, those sealed with the first key too (an id says
 * nothing about the key behind it), and if any does not open, nothing is written: the operator
 * lists the missing key and runs it again, rather than finding a half-rotated database. The
 * second rewrites. Safe while daemons run: each row is rewritten only if it still holds the value
 * read (compare-and-set), so a value a daemon changed meanwhile is left to it.
 */
export async function resealValues(context: StorageContext): Promise<ResealCounts> {
  const { db, adapter, keyring } = context;
  const primary = keyring.primaryKeyId;
  if (primary === null)
    throw new EncryptionKeyError('no encryption key is configured: set DEFERFLOW_ENCRYPTION_KEYS or --encryption-keys-file, the new key first');
  const resealed = Object.fromEntries(SEALABLE_COLUMNS.map((column) => [column.sealed, 0])) as Record<SealedColumn, number>;
  const unreadable: string[] = [];
  for (const column of SEALABLE_COLUMNS) {
    await eachStoredValueBatch(context, column, async (rows) => {
      for (const { value, name } of rows) opened(keyring, value, column.sealed, name, unreadable);
    });
  }
  if (unreadable.length > 0) return { resealed, current: 0, unreadable, stoppedBeforeWriting: true };

  let current = 0;
  for (const column of SEALABLE_COLUMNS) {
    const form = sealedFormOf(adapter, column.sealed);
    await eachStoredValueBatch(context, column, async (rows) => {
      const rewrites: { id: number; from: StoredValue; to: StoredValue }[] = [];
      for (const { id, value, name } of rows) {
        const json = opened(keyring, value, column.sealed, name, unreadable);
        if (json === null) continue;
        if (Keyring.sealedWith(value) === primary) {
          current++;
          continue;
        }
        const to = keyring.seal(json, column.sealed, form);
        // Empty kwargs stay plain (see Keyring): as the first key would write them already.
        if (to === value) current++;
        else rewrites.push({ id, from: value, to });
      }
      if (rewrites.length === 0) return;
      await db.transaction().execute(async (trx) => {
        for (const { id, from, to } of rewrites) {
          const updated = await trx
            .updateTable(column.table)
            .set({ [column.column]: adapter.jsonParam(to) })
            .where(sql.ref(column.id), '=', id)
            .where(sql.ref(column.column), '=', adapter.jsonParam(from))
            .executeTakeFirst();
          resealed[column.sealed] += Number(updated.numUpdatedRows);
        }
      });
    });
  }
  return { resealed, current, unreadable, stoppedBeforeWriting: false };
}

/** `value` opened, or null with the reason added to `unreadable` when it does not open. */
function opened(keyring: Keyring, value: StoredValue, column: SealedColumn, row: string, unreadable: string[]): string | null {
  try {
    return keyring.open(value, column, row);
  } catch (error) {
    if (!(error instanceof EncryptionKeyError)) throw error;
    unreadable.push(error.message);
    return null;
  }
}

/** Calls `work` with each batch of a column's non-null values, in id order. */
async function eachStoredValueBatch(
  { db }: StorageContext,
  { table, column, id: key, row }: (typeof SEALABLE_COLUMNS)[number],
  work: (rows: { id: number; value: StoredValue; name: string }[]) => Promise<void>,
): Promise<void> {
  let after = 0;
  for (;;) {
    const rows = (await db
      .selectFrom(table)
      .select([sql.ref<number>(key).as('id'), sql.ref<string>(column).as('value')])
      .where(sql.ref(key), '>', after)
      .where(sql.ref(column), 'is not', null)
      .orderBy(sql.ref(key))
      .limit(BATCH)
      .execute()) as { id: number; value: StoredValue }[];
    if (rows.length === 0) return;
    after = rows[rows.length - 1]!.id;
    await work(rows.map(({ id, value }) => ({ id, value, name: `${row} ${id}` })));
  }
}
