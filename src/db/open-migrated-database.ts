import { openDatabase, type Database } from './connect.ts';
import { assertMigrated } from './migrate.ts';

/**
 * The database a command (other than `db migrate` and standalone) works on: it must exist and be
 * migrated to exactly this deferflow's migrations, else DF_DATABASE_NOT_MIGRATED says which and
 * how to fix it (exit 2), and nothing is created.
 */
export async function openMigratedDatabase(url: string): Promise<Database> {
  const database = openDatabase(url, { mustExist: true });
  try {
    await assertMigrated(database, url);
  } catch (error) {
    await database.close();
    throw error;
  }
  return database;
}
