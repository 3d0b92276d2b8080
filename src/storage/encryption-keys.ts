import { sql } from '../database/kysely.ts';
import { bytesHeader, STORED_TEXT_PREFIX } from '../database/encryption/sealed-format.ts';
import { EncryptionKeyError, EncryptionKeyMismatchError } from '../vocabulary/errors.ts';
import { fromDbTime, toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { SEALABLE_COLUMNS, sealedFormOf } from './sealed-values.ts';
import type { StoredValue } from '../database/encryption/keyring.ts';

/**
 * Checks a process's keys against the keys the database knows (table encryption_key), before
 * the process writes anything with them: every daemon at start, and `db rotate-key`.
 *
 * - An id the database knows must come with the check value recorded for it (Keyring.keyChecks),
 *   or the process is refused (DF_ENCRYPTION_KEY_MISMATCH): with other material under a known id
 *   it would seal values nobody else can open, and count values sealed with the real key as
 *   current from their id alone.
 * - An id it does not know yet is proved against what was sealed with it before the table
 *   existed (or by a process that never recorded it): one value per column, where any exists,
 *   must open with this key. Then its check value is recorded. Two processes recording different
 *   material at once: the first insert stands, and the other reads it back and is refused.
 */
export async function verifyEncryptionKeys(context: StorageContext, now: number): Promise<void> {
  const { db } = context;
  for (const { id, check } of context.keyring.keyChecks()) {
    let recorded = await recordedKey(context, id);
    if (recorded === undefined) {
      await proveAgainstSealedValues(context, id);
      await db
        .insertInto('encryption_key')
        .values({ key_id: id, check_value: check, recorded_at: toDbTime(now) })
        .onConflict((conflict) => conflict.column('key_id').doNothing())
        .execute();
      recorded = await recordedKey(context, id);
    }
    if (recorded?.check_value !== check) {
      const since = recorded ? new Date(fromDbTime(recorded.recorded_at)).toISOString() : 'unknown';
      throw new EncryptionKeyMismatchError(id, `the database recorded other key material under ${id} on ${since}`);
    }
  }
}

function recordedKey({ db }: StorageContext, id: string) {
  return db.selectFrom('encryption_key').select(['check_value', 'recorded_at']).where('key_id', '=', id).executeTakeFirst();
}

/** Refuses key `id` if a value sealed with an id of that name (in any column) does not open with it. */
async function proveAgainstSealedValues(context: StorageContext, id: string): Promise<void> {
  const { db, adapter, keyring } = context;
  const textPrefix = `${STORED_TEXT_PREFIX}${id}:`;
  const header = bytesHeader(id);
  for (const { table, column, id: key, sealed, row } of SEALABLE_COLUMNS) {
    const value = sql.ref(column);
    // substr rather than LIKE: key ids may hold `_`, LIKE's one-character wildcard.
    const inText = sql<boolean>`substr(cast(${value} as text), 1, ${textPrefix.length}) = ${textPrefix}`;
    const inBytes = sql<boolean>`substr(${value}, 1, ${header.length}) = ${header}`;
    const found = (await db
      .selectFrom(table)
      .select([sql.ref<number>(key).as('id'), value.as('value')])
      .where(sealedFormOf(adapter, sealed) === 'bytes' ? sql<boolean>`(${inText} or ${inBytes})` : inText)
      .orderBy(sql.ref(key))
      .limit(1)
      .executeTakeFirst()) as { id: number; value: StoredValue } | undefined;
    if (found === undefined) continue;
    try {
      keyring.open(found.value, sealed, `${row} ${found.id}`);
    } catch (error) {
      if (!(error instanceof EncryptionKeyError)) throw error;
      throw new EncryptionKeyMismatchError(id, `${row} ${found.id}'s ${column}, sealed with ${id}, does not decrypt with it`);
    }
  }
}
