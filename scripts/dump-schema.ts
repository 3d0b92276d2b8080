/**
 * Regenerates the committed schema dumps, migrations/schema/sqlite.sql and
 * migrations/schema/postgres.sql: migrates a fresh SQLite file and a fresh PostgreSQL schema
 * and writes what `deferflow db schema` prints for each. test/process/migrations.test.ts compares a
 * freshly migrated database with these files, so a migration change shows up in review.
 *
 *   npm run db:schema        (= npx tsx scripts/dump-schema.ts)
 *
 * PostgreSQL: DEFERFLOW_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test. A temporary
 * schema is created there and dropped afterwards.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { dumpSchema } from '../src/database/schema-dump.ts';
import { createScratchSchema } from '../test/support/pg-schemas.ts';

const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';
const OUTPUT_DIR = fileURLToPath(new URL('../migrations/schema/', import.meta.url));

async function dumpOf(url: string): Promise<string> {
  const database = openDatabase(url, { poolSize: 1 });
  try {
    await migrateToLatest(database);
    return await dumpSchema(database);
  } finally {
    await database.close();
  }
}

async function dumpSqlite(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-schema-dump-'));
  try {
    return await dumpOf(`sqlite:${path.join(dir, 'schema.db')}`);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

async function dumpPostgres(baseUrl: string): Promise<string> {
  const schema = await createScratchSchema(baseUrl, 'deferflow_schema_dump');
  try {
    return await dumpOf(schema.url);
  } finally {
    await schema.drop();
  }
}

async function main(): Promise<void> {
  const pgUrl = process.env.DEFERFLOW_TEST_PG_URL || DEFAULT_PG_URL;
  const dumps = { sqlite: await dumpSqlite(), postgres: await dumpPostgres(pgUrl) };
  await fs.mkdir(OUTPUT_DIR, { recursive: true });
  for (const [dialect, text] of Object.entries(dumps)) {
    const file = path.join(OUTPUT_DIR, `${dialect}.sql`);
    const before = await fs.readFile(file, 'utf8').catch(() => null);
    await fs.writeFile(file, text);
    const status = before === null ? 'created' : before === text ? 'unchanged' : 'updated';
    process.stdout.write(`${path.relative(process.cwd(), file)}: ${status}\n`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`dump-schema: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
