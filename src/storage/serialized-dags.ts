import { toDbTime } from '../database/schema.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';

export type SerializedDagWrite = 'created' | 'updated' | 'unchanged';

/**
 * Stores a DAG's serialized JSON, rewriting the row only when the hash changed (or the DAG
 * comes back after being marked deleted), so an unchanged DAG costs one conditional statement.
 */
export async function writeSerializedDag(
  { db, adapter }: StorageContext,
  dag: { dagId: string; fileloc: string; data: JsonObject; hash: string; schemaVersion: number },
  now: number,
): Promise<SerializedDagWrite> {
  const existing = await db.selectFrom('serialized_dag').select(['hash', 'deleted_at']).where('dag_id', '=', dag.dagId).executeTakeFirst();
  if (existing && existing.hash === dag.hash && existing.deleted_at === null) return 'unchanged';
  const values = {
    fileloc: dag.fileloc,
    data: adapter.jsonParam(JSON.stringify(dag.data)),
    hash: dag.hash,
    schema_version: dag.schemaVersion,
    last_updated: toDbTime(now),
    deleted_at: null,
  };
  await db
    .insertInto('serialized_dag')
    .values({ dag_id: dag.dagId, ...values })
    .onConflict((conflict) => conflict.column('dag_id').doUpdateSet(values))
    .execute();
  return existing ? 'updated' : 'created';
}

/**
 * Marks deleted every stored DAG not among `present` (the DAGs just loaded), except those of
 * `brokenFiles`: a file that failed to load keeps its DAGs' last good version (and an import
 * error says why). Returns the dag ids marked.
 */
export async function markMissingDagsDeleted(
  { db }: StorageContext,
  present: readonly string[],
  brokenFiles: readonly string[],
  now: number,
): Promise<string[]> {
  let query = db
    .updateTable('serialized_dag')
    .set({ deleted_at: toDbTime(now) })
    .where('deleted_at', 'is', null);
  if (present.length > 0) query = query.where('dag_id', 'not in', [...present]);
  if (brokenFiles.length > 0) query = query.where('fileloc', 'not in', [...brokenFiles]);
  const rows = await query.returning('dag_id').execute();
  return rows.map((row) => row.dag_id);
}

/** The files that define the DAGs not marked deleted (where DAG processing last found them). */
export async function activeDagFilelocs({ db }: StorageContext): Promise<string[]> {
  const rows = await db.selectFrom('serialized_dag').select('fileloc').distinct().where('deleted_at', 'is', null).orderBy('fileloc').execute();
  return rows.map((row) => row.fileloc);
}

/** Every DAG that is not deleted, with where it was found and its serialized JSON (text), by dag id. */
export async function listSerializedDags({ db }: StorageContext): Promise<{ dagId: string; fileloc: string; dataJson: string; paused: boolean }[]> {
  const rows = await db
    .selectFrom('serialized_dag')
    .select(['dag_id', 'fileloc', 'data', 'paused'])
    .where('deleted_at', 'is', null)
    .orderBy('dag_id')
    .execute();
  return rows.map((row) => ({ dagId: row.dag_id, fileloc: row.fileloc, dataJson: row.data, paused: row.paused === 1 }));
}

/** The DAG files that failed to load at the last processing, and why. */
export async function listImportErrors({ db }: StorageContext): Promise<{ fileloc: string; message: string }[]> {
  return db.selectFrom('import_error').select(['fileloc', 'message']).orderBy('fileloc').execute();
}

/** The stored JSON and hash of a DAG that is not deleted, whether it is paused, or null. */
export async function readSerializedDag(
  { db }: StorageContext,
  dagId: string,
): Promise<{ data: string; hash: string; fileloc: string; paused: boolean } | null> {
  const row = await db
    .selectFrom('serialized_dag')
    .select(['data', 'hash', 'fileloc', 'paused'])
    .where('dag_id', '=', dagId)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  return row ? { data: row.data, hash: row.hash, fileloc: row.fileloc, paused: row.paused === 1 } : null;
}

/** Every DAG that is not deleted, with the hash of its serialized JSON. */
export async function listActiveDags({ db }: StorageContext): Promise<{ dagId: string; hash: string; paused: boolean }[]> {
  const rows = await db.selectFrom('serialized_dag').select(['dag_id', 'hash', 'paused']).where('deleted_at', 'is', null).orderBy('dag_id').execute();
  return rows.map((row) => ({ dagId: row.dag_id, hash: row.hash, paused: row.paused === 1 }));
}

/** The hash of a DAG's current serialized JSON; null when deleted or unknown. */
export async function readSerializedDagHash({ db }: StorageContext, dagId: string): Promise<string | null> {
  const row = await db.selectFrom('serialized_dag').select('hash').where('dag_id', '=', dagId).where('deleted_at', 'is', null).executeTakeFirst();
  return row?.hash ?? null;
}

/** The import errors are exactly `errors` now: fixed files lose theirs, broken ones get (or update) one. */
export async function replaceImportErrors({ db }: StorageContext, errors: readonly { fileloc: string; message: string }[], now: number): Promise<void> {
  await db.transaction().execute(async (trx) => {
    let stale = trx.deleteFrom('import_error');
    if (errors.length > 0)
      stale = stale.where(
        'fileloc',
        'not in',
        errors.map((error) => error.fileloc),
      );
    await stale.execute();
    for (const error of errors) {
      await trx
        .insertInto('import_error')
        .values({ fileloc: error.fileloc, message: error.message, created_at: toDbTime(now) })
        .onConflict((conflict) => conflict.column('fileloc').doUpdateSet({ message: error.message, created_at: toDbTime(now) }))
        .execute();
    }
  });
}
