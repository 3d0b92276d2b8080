import { fileURLToPath } from 'node:url';
import { Migrator, sql } from './kysely.ts';
import type { Kysely, Migration, MigrationResultSet } from 'kysely';
import { MIGRATIONS } from '../../migrations/index.ts';
import { withSqliteSchemaEdits, type Database } from './connect.ts';
import type { DialectAdapter } from './dialect.ts';
import { DatabaseNotMigratedError, InvalidDatabaseUrlError, MigrationFailedError } from '../vocabulary/errors.ts';
import { redactDatabaseUrl } from './database-url.ts';

/** The folder of the migration sources and the committed schema dumps (in a checkout). */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
const MIGRATION_TABLE = 'deferflow_migration';

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
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: 'deferflow_migration_lock',
  });
  const result: MigrationResultSet = await withSqliteSchemaEdits(database.db, () => migrator.migrateToLatest());
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error');
    throw new MigrationFailedError(`migration ${failed?.migrationName ?? '(setup)'} failed: ${String(result.error)}`, {
      cause: result.error,
    });
  }
  return (result.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/**
 * Throws DF_DATABASE_NOT_MIGRATED, naming the versions and the fix, unless the database has
 * exactly the migrations this deferflow knows: every command but `db migrate` checks this first,
 * so a mistyped URL or a forgotten migration is one clear line, not a raw SQL error later.
 */
export async function assertMigrated(database: Database, url: string): Promise<void> {
  const known = Object.keys(MIGRATIONS).sort();
  const shown = redactDatabaseUrl(url);
  const fix = `run \`deferflow db migrate --db ${shown}\``;
  const applied = (await database.adapter.hasTable(database.db, MIGRATION_TABLE))
    ? (
        await database.db
          .selectFrom(MIGRATION_TABLE as never)
          .select('name' as never)
          .execute()
      )
        .map((row) => (row as { name: string }).name)
        .sort()
    : [];
  if (applied.length === 0)
    throw new DatabaseNotMigratedError(`database ${shown} is not migrated (it has no deferflow tables); ${fix}, or check --db (or DEFERFLOW_DATABASE_URL)`);
  const unknown = applied.filter((name) => !known.includes(name));
  if (unknown.length > 0) {
    throw new DatabaseNotMigratedError(
      `database ${shown} is newer than this deferflow: it has migration(s) ${unknown.join(', ')}, which this version does not know (it knows up to ${known.at(-1)}); upgrade deferflow`,
    );
  }
  const missing = known.filter((name) => !applied.includes(name));
  if (missing.length > 0) {
    throw new DatabaseNotMigratedError(`database ${shown} is behind: it is at ${applied.at(-1)}, this deferflow needs ${missing.join(', ')}; ${fix}`);
  }
}

async function currentSchema(database: Database): Promise<string> {
  const { db } = database;
  const result = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  const schema = result.rows[0]?.schema;
  if (!schema)
    throw new InvalidDatabaseUrlError(database.target.url, 'its search_path names no existing schema; create the schema, or fix options=-c search_path=…');
  return schema;
}

async function loadMigrations(adapter: DialectAdapter): Promise<Record<string, Migration>> {
  return Object.fromEntries(Object.entries(MIGRATIONS).map(([name, module]) => [name, { up: (db: Kysely<any>) => module.up(db, adapter) }]));
}
