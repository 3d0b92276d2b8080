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
import pg from 'pg';
import { inject } from 'vitest';

export type TestDialect = 'sqlite' | 'postgres';

export const testDialects: TestDialect[] = ['sqlite', 'postgres'];

const createdSchemas: string[] = [];
const createdDirs: string[] = [];

async function withClient<T>(connectionString: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** `base` with `options=-c search_path=<schema>` added to its query string. */
function withSearchPath(base: string, schema: string): string {
  const option = `-c search_path=${schema}`;
  const parsed = new URL(base);
  const existing = parsed.searchParams.get('options');
  if (existing !== null) {
    // Keep whatever options the base URL already carries.
    parsed.searchParams.set('options', `${existing} ${option}`);
    return parsed.toString();
  }
  const separator = parsed.search === '' ? (base.endsWith('?') ? '' : '?') : '&';
  return `${base}${separator}options=${encodeURIComponent(option)}`;
}

/** A URL for an empty database of the given dialect, private to the caller. */
export async function freshDatabaseUrl(dialect: TestDialect): Promise<string> {
  if (dialect === 'sqlite') {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-sqlite-'));
    createdDirs.push(dir);
    return `sqlite:${path.join(dir, 'test.db')}`;
  }

  const base = inject('pgUrl');
  const schema = `t_${crypto.randomBytes(8).toString('hex')}`;
  await withClient(base, async (client) => {
    await client.query(`create schema ${client.escapeIdentifier(schema)}`);
  });
  createdSchemas.push(schema);

  const url = withSearchPath(base, schema);
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

/** Drops every schema and removes every temp dir that freshDatabaseUrl created in this file. */
export async function dropTestDatabases(): Promise<void> {
  const schemas = createdSchemas.splice(0);
  const dirs = createdDirs.splice(0);
  if (schemas.length > 0) {
    await withClient(inject('pgUrl'), async (client) => {
      for (const schema of schemas) {
        await client.query(`drop schema if exists ${client.escapeIdentifier(schema)} cascade`);
      }
    });
  }
  await Promise.all(dirs.map((dir) => fs.rm(dir, { recursive: true, force: true })));
}
