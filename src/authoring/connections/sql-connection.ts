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
  return (await runQuery(connectionName, query, parameters, 'array'))[0]?.[0];
}

/**
 * The rows a query on a named connection returns, each an object by column name (same clients as
 * queryFirstCell). Placeholders are the connection's: `?` on SQLite, `$1` on PostgreSQL (see
 * connectionDialect).
 */
export async function queryRows(connectionName: string, query: string, parameters: readonly JsonValue[] = []): Promise<Record<string, unknown>[]> {
  return runQuery(connectionName, query, parameters, 'object');
}

/** Which database a named connection is: how its queries write placeholders and quote names. */
export function connectionDialect(connectionName: string): 'sqlite' | 'postgres' {
  return sqlTarget(connectionName).dialect;
}

function sqlTarget(connectionName: string): ReturnType<typeof parseDatabaseUrl> {
  const { url } = connectionFromEnv(connectionName);
  try {
    return parseDatabaseUrl(url);
  } catch {
    throw new InvalidOptionError('connection', `connection ${JSON.stringify(connectionName)} is not a sqlite: or postgres:// URL; a SQL query needs one`);
  }
}

async function runQuery(connectionName: string, query: string, parameters: readonly JsonValue[], mode: 'array'): Promise<unknown[][]>;
async function runQuery(connectionName: string, query: string, parameters: readonly JsonValue[], mode: 'object'): Promise<Record<string, unknown>[]>;
async function runQuery(connectionName: string, query: string, parameters: readonly JsonValue[], mode: 'array' | 'object'): Promise<unknown[]> {
  const target = sqlTarget(connectionName);
  if (target.dialect === 'sqlite') {
    let handle = sqliteHandles.get(target.file);
    if (!handle) {
      handle = new (betterSqlite3Package())(target.file, { readonly: true, fileMustExist: true });
      handle.pragma('busy_timeout = 5000');
      sqliteHandles.set(target.file, handle);
    }
    return handle
      .prepare(query)
      .raw(mode === 'array')
      .all(...(parameters as unknown[]));
  }
  let pool = pgPools.get(target.url);
  if (!pool) {
    pool = new (pgPackage().Pool)({ connectionString: target.url, max: 2, idleTimeoutMillis: 10_000, allowExitOnIdle: true });
    // An idle client's error (the server restarted) must not crash the process: the next query reconnects.
    pool.on('error', () => {});
    pgPools.set(target.url, pool);
  }
  if (mode === 'array') return (await pool.query({ text: query, values: parameters as unknown[], rowMode: 'array' })).rows;
  return (await pool.query({ text: query, values: parameters as unknown[] })).rows;
}

/** A PostgreSQL connection LISTENing on one channel for every trigger waiting on it (see nextNotification). */
interface ChannelListener {
  readonly waiters: Set<() => void>;
  client: pg.Client | null;
  linger: NodeJS.Timeout | undefined;
}
const channelListeners = new Map<string, ChannelListener>();
/** How long a listener with no waiter keeps its connection, for the next wait on the channel. */
const LISTENER_LINGER_MS = 10_000;

/**
 * Resolves at the next NOTIFY on `channel` of a named PostgreSQL connection (one listening
 * connection per URL and channel in the process, shared by every caller); never on SQLite, which
 * has none. A caller races it with its poll: a lost listening connection is not reported (the
 * poll reads meanwhile) and is made again at the next call. `signal` withdraws the call.
 */
export function nextNotification(connectionName: string, channel: string, signal?: AbortSignal): Promise<void> {
  const target = sqlTarget(connectionName);
  if (target.dialect !== 'postgres' || signal?.aborted) return new Promise<void>(() => {});
  const key = `${target.url}\n${channel}`;
  let listener = channelListeners.get(key);
  if (!listener) {
    listener = { waiters: new Set(), client: null, linger: undefined };
    channelListeners.set(key, listener);
    listen(target.url, channel, key, listener);
  }
  const held = listener;
  clearTimeout(held.linger);
  return new Promise<void>((resolve) => {
    const wake = () => resolve();
    held.waiters.add(wake);
    signal?.addEventListener(
      'abort',
      () => {
        held.waiters.delete(wake);
        lingerIfIdle(key, held);
      },
      { once: true },
    );
  });
}

function listen(url: string, channel: string, key: string, listener: ChannelListener): void {
  const client = new (pgPackage().Client)({ connectionString: url });
  listener.client = client;
  const drop = () => {
    if (channelListeners.get(key) === listener) channelListeners.delete(key);
    clearTimeout(listener.linger);
    listener.client = null;
    void client.end().catch(() => {});
  };
  // A lost connection (the server restarted) must not crash the process: the next call listens again.
  client.on('error', drop);
  client.on('end', drop);
  client.on('notification', (message) => {
    if (message.channel !== channel) return;
    const waiters = [...listener.waiters];
    listener.waiters.clear();
    for (const wake of waiters) wake();
    lingerIfIdle(key, listener);
  });
  client
    .connect()
    .then(() => client.query(`LISTEN "${channel.replaceAll('"', '""')}"`))
    .catch(drop);
}

function lingerIfIdle(key: string, listener: ChannelListener): void {
  if (listener.waiters.size > 0 || channelListeners.get(key) !== listener) return;
  clearTimeout(listener.linger);
  listener.linger = setTimeout(() => {
    if (listener.waiters.size > 0 || channelListeners.get(key) !== listener) return;
    channelListeners.delete(key);
    void listener.client?.end().catch(() => {});
  }, LISTENER_LINGER_MS);
  listener.linger.unref();
}

/** Airflow's SqlSensor rule: a first cell that is there and not null, false, 0, "0" or "". */
export function isTruthyCell(cell: unknown): boolean {
  return !(cell === undefined || cell === null || cell === false || cell === 0 || cell === 0n || cell === '0' || cell === '');
}

const sqliteHandles = new Map<string, BetterSqlite3.Database>();
const pgPools = new Map<string, pg.Pool>();
