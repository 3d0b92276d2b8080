import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Migrator, sql, type Kysely, type Migration, type MigrationResultSet } from 'kysely';
import type { Database } from './connect.ts';
import type { DialectAdapter } from './dialect.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
const MIGRATION_FILE = /^(\d{4})_[a-z0-9_]+\.ts$/;

interface MigrationModule {
  up(db: Kysely<any>, adapter: DialectAdapter): Promise<void>;
}

/**
 * Applies the numbered migrations in migrations/ that the database lacks. Safe when several
 * processes run it at once: kysely's migrator holds a PostgreSQL advisory lock for the whole
 * run, and on SQLite its transaction starts with BEGIN IMMEDIATE (see connect.ts).
 */
export async function migrateToLatest(database: Database): Promise<string[]> {
  const migrator = new Migrator({
    db: database.db,
    // On PostgreSQL the bookkeeping tables live in the schema the URL selects: kysely would
    // otherwise take a same-named table in any other schema for ours.
    migrationTableSchema: database.adapter.name === 'postgres' ? await currentSchema(database) : undefined,
    provider: { getMigrations: () => loadMigrations(database.adapter) },
    migrationTableName: 'deferflow_migration',
    migrationLockTableName: 'deferflow_migration_lock',
  });
  const result: MigrationResultSet = await migrator.migrateToLatest();
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error');
    throw new Error(`migration ${failed?.migrationName ?? '(setup)'} failed: ${String(result.error)}`, {
      cause: result.error,
    });
  }
  return (result.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

async function currentSchema({ db }: Database): Promise<string> {
  const result = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  const schema = result.rows[0]?.schema;
  if (!schema) throw new Error('the PostgreSQL search_path names no existing schema; create it or fix options=-c search_path=…');
  return schema;
}

async function loadMigrations(adapter: DialectAdapter): Promise<Record<string, Migration>> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((name) => MIGRATION_FILE.test(name)).sort();
  const migrations: Record<string, Migration> = {};
  for (const file of files) {
    const module = (await import(pathToFileURL(path.join(MIGRATIONS_DIR, file)).href)) as MigrationModule;
    migrations[file.replace(/\.ts$/, '')] = { up: (db) => module.up(db, adapter) };
  }
  return migrations;
}
