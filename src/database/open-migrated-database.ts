import { DatabaseError, DeferflowError } from '../vocabulary/errors.ts';
import { openDatabase, type Database } from './connect.ts';
import type { Keyring } from './encryption/keyring.ts';
import { redactDatabaseUrl } from './database-url.ts';
import { assertMigrated } from './migrate.ts';

/**
 * The database a command (other than `db migrate` and standalone) works on: it must exist and be
 * migrated to exactly this deferflow's migrations, else DF_DATABASE_NOT_MIGRATED says which and
 * how to fix it (exit 2), and nothing is created.
 */
export async function openMigratedDatabase(url: string, keyring?: Keyring): Promise<Database> {
  const database = openDatabase(url, { mustExist: true, keyring });
  try {
    await assertMigrated(database, url);
  } catch (error) {
    await database.close().catch(() => {});
    throw unreachable(url, error);
  }
  return database;
}

/**
 * What a failure to reach the database at start is reported as: DF_DATABASE naming the database
 * and the fix (a supervisor starts the process again; a person checks the URL or the server),
 * unless it is one of deferflow's own errors already (not migrated, a bad URL).
 */
export function unreachable(url: string, error: unknown): unknown {
  if (error instanceof DeferflowError) return error;
  const reason = error instanceof Error ? error.message : String(error);
  return new DatabaseError(
    `could not reach the database ${redactDatabaseUrl(url)}: ${reason}; check --db (or DEFERFLOW_DATABASE_URL) and that the server is running`,
    { cause: error },
  );
}
