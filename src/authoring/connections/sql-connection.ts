import type BetterSqlite3 from 'better-sqlite3';
import type pg from 'pg';
import { betterSqlite3Package, pgPackage } from '../../vocabulary/lazy-package.ts';
import { parseDatabaseUrl } from '../../database/database-url.ts';
import { InvalidOptionError } from '../../vocabulary/errors.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';
import { connectionFromEnv } from './connections.ts';

/**
 * Runs a query on a named connection (a `sqlite:` or `postgres://` URL from DEFERFLOW_CONN_<NAME>)
 * and returns the first column of its first row (undefined: no row). What SqlTrigger and SqlSensor
 * ask. Clients are shared by URL for the life of the process, so many sensors on one connection
 * use one small pool (PostgreSQL, 2 connections that close when idle) or one read-only handle
 * (SQLite), not one each.
 */
export async function queryFirstCell(connectionName: string, query: string, parameters: readonly JsonValue[] = []): Promise<unknown> {
  const { url } = connectionFromEnv(connectionName);
  let target: ReturnType<typeof parseDatabaseUrl>;
  try {
    target = parseDatabaseUrl(url);
  } catch {
    throw new InvalidOptionError('connection', `connection ${JSON.stringify(connectionName)} is not a sqlite: or postgres:// URL; a SQL query needs one`);
  }
  if (target.dialect === 'sqlite') {
    let handle = sqliteHandles.get(target.file);
    if (!handle) {
      handle = new (betterSqlite3Package())(target.file, { readonly: true, fileMustExist: true });
      handle.pragma('busy_timeout = 5000');
      sqliteHandles.set(target.file, handle);
    }
    const row = handle
      .prepare(query)
      .raw(true)
      .get(...(parameters as unknown[])) as unknown[] | undefined;
    return row?.[0];
  }
  let pool = pgPools.get(target.url);
  if (!pool) {
    pool = new (pgPackage().Pool)({ connectionString: target.url, max: 2, idleTimeoutMillis: 10_000, allowExitOnIdle: true });
    // An idle client's error (the server restarted) must not crash the process: the next query reconnects.
    pool.on('error', () => {});
    pgPools.set(target.url, pool);
  }
  const result = await pool.query({ text: query, values: parameters as unknown[], rowMode: 'array' });
  return (result.rows[0] as unknown[] | undefined)?.[0];
}

/** Airflow's SqlSensor rule: a first cell that is there and not null, false, 0, "0" or "". */
export function isTruthyCell(cell: unknown): boolean {
  return !(cell === undefined || cell === null || cell === false || cell === 0 || cell === 0n || cell === '0' || cell === '');
}

const sqliteHandles = new Map<string, BetterSqlite3.Database>();
const pgPools = new Map<string, pg.Pool>();
