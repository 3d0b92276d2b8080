/**
 * Per-test database helpers.
 *
 *   const url = await freshDatabaseUrl('postgres'); // or 'sqlite'
 *   afterAll(dropTestDatabases);
 *
 * sqlite:   `sqlite:/tmp/deferflow-sqlite-XXXX/test.db` (a new file in a new temp dir)
 * postgres: the run's server URL (see global-setup.ts) plus
 *           `options=-c search_path=t_<hex>`, a freshly created schema, so
 *           every unqualified table lives in that schema.
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { createScratchSchema, dropSchemas, withClient } from './pg-schemas.ts';

export type TestDialect = 'sqlite' | 'postgres';

const ALL_DIALECTS: readonly TestDialect[] = ['sqlite', 'postgres'];

/**
 * The dialects the suites loop over: both, or those DEFERFLOW_TEST_DIALECTS names
 * (`sqlite`, `postgres` or `sqlite,postgres`), to run one while working on it. A name it does not
 * know fails the run rather than running nothing.
 */
export const testDialects: TestDialect[] = dialectsFrom(process.env.DEFERFLOW_TEST_DIALECTS);
/**
 * The one dialect (the first of testDialects: sqlite unless narrowed) for an end-to-end run of
 * what a user sees whose database operations are tested on both dialects by tests of their own
 * (an example DAG run, a page in a browser): spawned processes cost most of the suite's CPU.
 */
export const oneDialect: TestDialect[] = testDialects.slice(0, 1);

function dialectsFrom(given: string | undefined): TestDialect[] {
  if (given === undefined || given.trim() === '') return [...ALL_DIALECTS];
  const names = given.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !(ALL_DIALECTS as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`DEFERFLOW_TEST_DIALECTS: ${unknown.join(', ')} is not one of ${ALL_DIALECTS.join(', ')}`);
  return ALL_DIALECTS.filter((dialect) => names.includes(dialect));
}

const createdSchemas: string[] = [];
const createdPgDatabases: string[] = [];
const createdDirs: string[] = [];

/** A URL for an empty database of the given dialect, private to the caller. */
export async function freshDatabaseUrl(dialect: TestDialect): Promise<string> {
  if (dialect === 'sqlite') {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-sqlite-'));
    createdDirs.push(dir);
    return `sqlite:${path.join(dir, 'test.db')}`;
  }

  const { name: schema, url } = await createScratchSchema(inject('pgUrl'), 't');
  createdSchemas.push(schema);

  // Make sure the driver really applies `options` from the connection string.
  const searchPath = await withClient(url, async (client) => {
    const result = await client.query<{ search_path: string }>('show search_path');
    return result.rows[0]?.search_path;
  });
  if (searchPath !== schema) {
    throw new Error(`freshDatabaseUrl: expected search_path ${schema} through ${url}, got ${String(searchPath)}`);
  }
  return url;
}

/**
 * A URL for a PostgreSQL database of its own on the run's server, not a schema of the shared one:
 * empty, for tests that listen (LISTEN/NOTIFY channels belong to a database, so the
 * notifications of test files running meanwhile in other schemas would reach them), or a copy of
 * the run's migrated template (global-setup.ts) when `migrated`.
 */
export async function freshPostgresDatabaseUrl({ migrated = false }: { migrated?: boolean } = {}): Promise<string> {
  const name = `d_${crypto.randomBytes(8).toString('hex')}`;
  await withClient(inject('pgUrl'), (client) =>
    client.query(`create database ${client.escapeIdentifier(name)}${migrated ? ` template ${client.escapeIdentifier(inject('pgTemplate'))}` : ''}`),
  );
  createdPgDatabases.push(name);
  const url = new URL(inject('pgUrl'));
  url.pathname = `/${name}`;
  return url.toString();
}

/** Drops every schema and database and removes every temp dir that this file's tests created. */
export async function dropTestDatabases(): Promise<void> {
  const schemas = createdSchemas.splice(0);
  const pgDatabases = createdPgDatabases.splice(0);
  const dirs = createdDirs.splice(0);
  if (schemas.length > 0) await dropSchemas(inject('pgUrl'), schemas);
  if (pgDatabases.length > 0) {
    await withClient(inject('pgUrl'), async (client) => {
      for (const name of pgDatabases) await client.query(`drop database if exists ${client.escapeIdentifier(name)} with (force)`);
    });
  }
  await Promise.all(dirs.map((dir) => fs.rm(dir, { recursive: true, force: true })));
}
