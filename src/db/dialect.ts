import { sql, type RawBuilder, type SelectQueryBuilder } from 'kysely';

/**
 * Every difference between SQLite and PostgreSQL that a query needs lives here; storage
 * operations ask this adapter and stay dialect-free (kysely's own split, on a small scale).
 */
export interface DialectAdapter {
  readonly name: 'sqlite' | 'postgres';
  /**
   * Row locks exist (FOR UPDATE / FOR SHARE / SKIP LOCKED). Without them (SQLite) every write
   * transaction holds the one database-wide write lock, which serializes the same races.
   */
  readonly supportsRowLocks: boolean;
  /** How many bind parameters one statement may carry, with headroom. */
  readonly maxBindParameters: number;
  readonly types: { readonly json: string; readonly time: string; readonly bigint: string };
  /** `SELECT … FOR UPDATE SKIP LOCKED` where row locks exist; unchanged elsewhere. */
  lockSkippingLocked<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  lockForUpdate<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  lockForShare<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  /** `json` (a JSON object column) with `key` set to `value` (a JSON value expression). */
  jsonSetKey(json: RawBuilder<unknown>, key: string, value: RawBuilder<unknown>): RawBuilder<string>;
  /**
   * The JSON value under `key` (an integer expression) in the JSON object passed as the
   * parameter `mapJson`: one parameter carries a whole batch's per-row values, looked up by
   * index, where a joined VALUES list would be scanned (SQLite builds it no index).
   */
  jsonMapValue(mapJson: string, key: RawBuilder<unknown>): RawBuilder<unknown>;
  /** A bind parameter holding JSON text, typed for this dialect's JSON column. */
  jsonParam(jsonText: string): RawBuilder<string>;
}

export const postgresAdapter: DialectAdapter = {
  name: 'postgres',
  supportsRowLocks: true,
  maxBindParameters: 60_000,
  types: { json: 'jsonb', time: 'timestamptz', bigint: 'bigint' },
  lockSkippingLocked: (query) => query.forUpdate().skipLocked(),
  lockForUpdate: (query) => query.forUpdate(),
  lockForShare: (query) => query.forShare(),
  jsonSetKey: (json, key, value) => sql<string>`jsonb_set(coalesce(${json}, '{}'::jsonb), ${sql.lit(`{${key}}`)}, ${value})`,
  jsonMapValue: (mapJson, key) => sql`(cast(${mapJson} as jsonb) -> cast(${key} as text))`,
  jsonParam: (jsonText) => sql<string>`cast(${jsonText} as jsonb)`,
};

export const sqliteAdapter: DialectAdapter = {
  name: 'sqlite',
  supportsRowLocks: false,
  maxBindParameters: 30_000,
  types: { json: 'text', time: 'text', bigint: 'integer' },
  lockSkippingLocked: (query) => query,
  lockForUpdate: (query) => query,
  lockForShare: (query) => query,
  jsonSetKey: (json, key, value) => sql<string>`json_set(coalesce(${json}, '{}'), ${sql.lit(`$.${key}`)}, ${value})`,
  jsonMapValue: (mapJson, key) => sql`json(${mapJson} -> ('$."' || ${key} || '"'))`,
  jsonParam: (jsonText) => sql<string>`${jsonText}`,
};
