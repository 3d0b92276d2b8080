import type { Argv } from 'yargs';
import { openDatabase, type Database } from '../db/connect.ts';
import { openMigratedDatabase } from '../db/open-migrated-database.ts';
import { DEFAULT_DATABASE_URL, redactDatabaseUrl } from '../db/database-url.ts';
import { migrateToLatest } from '../db/migrate.ts';
import { dumpSchema } from '../db/schema-dump.ts';
import { COMMON_OPTIONS } from '../config/common-options.ts';

export function databaseUrlFrom(flag: string | undefined): string {
  return flag ?? process.env[COMMON_OPTIONS.db.env] ?? DEFAULT_DATABASE_URL;
}

/**
 * Runs `work` on the database --db (or its environment variable) names, which must exist and be
 * migrated (see openMigratedDatabase), and closes it however `work` ends.
 */
export async function withMigratedDatabase<T>(dbFlag: unknown, work: (database: Database) => Promise<T>): Promise<T> {
  const database = await openMigratedDatabase(databaseUrlFrom(dbFlag as string | undefined));
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

export function registerDbCommands(cli: Argv): void {
  cli.command(
    'db <action>',
    'Database commands: migrate, schema',
    (db) =>
      db
        .positional('action', { choices: ['migrate', 'schema'] as const, describe: 'migrate: apply new migrations; schema: print the schema' })
        .option('db', { type: 'string', describe: `${COMMON_OPTIONS.db.describe} [env ${COMMON_OPTIONS.db.env}, default ${DEFAULT_DATABASE_URL}]` }),
    async (args) => {
      const url = databaseUrlFrom(args.db);
      // migrate creates what is missing; schema shows a migrated database only.
      const database = args.action === 'migrate' ? openDatabase(url) : await openMigratedDatabase(url);
      try {
        if (args.action === 'migrate') {
          const applied = await migrateToLatest(database);
          process.stdout.write(
            applied.length > 0
              ? `applied ${applied.length} migration(s) to ${redactDatabaseUrl(url)}: ${applied.join(', ')}\n`
              : `${redactDatabaseUrl(url)} is up to date\n`,
          );
        } else {
          process.stdout.write(await dumpSchema(database));
        }
      } finally {
        await database.close();
      }
    },
  );
}
