/**
 * Regenerates the committed schema dumps, migrations/schema/sqlite.sql and
 * migrations/schema/postgres.sql: migrates a fresh SQLite file and a fresh PostgreSQL schema
 * and writes what `deferflow db schema` prints for each. test/migrations.test.ts compares a
 * freshly migrated database with these files, so a migration change shows up in review.
 *
 *   npm run db:schema        (= npx tsx scripts/dump-schema.ts)
 *
 * PostgreSQL: DEFERFLOW_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test. A temporary
 * schema is created there and dropped afterwards.
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { openDatabase } from '../src/db/connect.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { dumpSchema } from '../src/db/schema-dump.ts';

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

/** `base` with `-c search_path=<schema>` added to its `options` query parameter. */
function withSearchPath(base: string, schema: string): string {
  const url = new URL(base);
  const existing = url.searchParams.get('options');
  url.searchParams.set('options', `${existing ? `${existing} ` : ''}-c search_path=${schema}`);
  return url.toString();
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function dumpPostgres(baseUrl: string): Promise<string> {
  const schema = `deferflow_schema_dump_${crypto.randomBytes(6).toString('hex')}`;
  await withClient(baseUrl, (client) => client.query(`create schema ${client.escapeIdentifier(schema)}`));
  try {
    return await dumpOf(withSearchPath(baseUrl, schema));
  } finally {
    await withClient(baseUrl, (client) => client.query(`drop schema if exists ${client.escapeIdentifier(schema)} cascade`));
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
