import { CompiledQuery, sql } from './kysely.ts';
import type { Kysely, RawBuilder, SelectQueryBuilder, SqlBool, Transaction } from 'kysely';
import { Keyring, type SealedForm, type StoredValue } from './encryption/keyring.ts';
import { PG_NOTIFY_SQL, SCHEMA_TAG_SQL } from './postgres-driver.ts';
import { MigrationFailedError } from '../vocabulary/errors.ts';

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
  /**
   * A WITH clause may hold INSERT and UPDATE statements (PostgreSQL's data-modifying CTEs): writes
   * to several tables in one statement, one round trip where each would cost one.
   */
  readonly supportsWritingCtes: boolean;
  /**
   * How many write transactions are worth running at once. PostgreSQL spreads them over its
   * backends (cores); SQLite has one write lock, so a second writer would only wait.
   */
  readonly concurrentWrites: number;
  /** How many bind parameters one statement may carry, with headroom. */
  readonly maxBindParameters: number;
  readonly types: { readonly json: string; readonly time: string; readonly bigint: string };
  /**
   * How sealed event payloads (task_instance.next_event) are stored (see encryption/keyring.ts):
   * a JSON string where the column must hold JSON (jsonb), or their bytes where a text column
   * keeps a blob as it is (SQLite), a third fewer bytes, which a firing writes by the thousand
   * and a worker reads one at a time. Other sealed values are text on both: the triggerer reads
   * trigger kwargs by the thousand, and a Buffer each costs it more than the shorter value saves.
   */
  readonly sealedEventForm: SealedForm;
  /**
   * How the driver itself spells the `position`-th bind parameter (1-based) of a statement
   * written as text for a bare connection (not kysely): `$1` or `?`.
   */
  parameter(position: number): string;
  /** `SELECT … FOR UPDATE SKIP LOCKED` where row locks exist; unchanged elsewhere. */
  lockSkippingLocked<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  lockForUpdate<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  lockForShare<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O>;
  /**
   * Makes a batch of per-trigger JSON values readable by later statements of `trx`, and returns
   * the expression that reads the value of a trigger id expression. One batch at a time per
   * transaction; a later call replaces the earlier batch. A batch whose values are all one (a
   * burst of waits for one moment: their events are equal, and sealed once) is that one value,
   * bound once, with nothing staged.
   */
  stageTriggerValues(trx: Transaction<any>, values: readonly TriggerValue[]): Promise<(triggerId: RawBuilder<unknown>) => RawBuilder<unknown>>;
  /**
   * `column` is one of `ids`. PostgreSQL takes the ids as one array parameter: parsing and
   * planning a list of 2,000 parameters costs more than the lookups it asks for.
   */
  idIn(column: string, ids: readonly number[]): RawBuilder<SqlBool>;
  /**
   * A relation of (key text, version integer) rows, one per pair, bound as one or two
   * parameters whatever their number: to join on, where an OR of pairs would outgrow SQLite's
   * expression depth (1,000) or either database's parameter limit.
   */
  keyVersionPairs(pairs: readonly (readonly [string, number])[]): RawBuilder<{ key: string; version: number }>;
  /** A bind parameter holding JSON text (or a sealed value in the form this dialect stores it), typed for this dialect's JSON column. */
  jsonParam<T extends StoredValue>(value: T): RawBuilder<T>;
  /**
   * Whether `error` says the database refused the values a statement carried (malformed JSON,
   * text it cannot store, a value too large): the same values would fail again, so a batch is
   * split to find them. Anything else (a lost connection, a lock timeout) may pass on a retry.
   */
  refusesValues(error: unknown): boolean;
  /**
   * Whether `error` says the database cannot be used for now, whatever a statement carries: a
   * lost or refused connection, a server starting or shutting down, SQLite's write lock held by
   * another process past the busy timeout, a full disk, an I/O error, a database that became
   * read-only (a PostgreSQL primary demoted in a failover). The same write works once it is
   * back, so a failing batch is kept whole (splitting it to find a culprit only multiplies the
   * writes to redo) and its outcomes are never failed for it.
   */
  unavailable(error: unknown): boolean;
  /** Whether a table of that name exists where unqualified names resolve (PostgreSQL: the search_path). */
  hasTable(db: Kysely<any>, table: string): Promise<boolean>;
  /**
   * Widens a column's `in (…)` CHECK constraint to take more values (a migration adding a state).
   * PostgreSQL drops and adds the named constraint. SQLite cannot alter a constraint, and its
   * table rebuild would cascade deletes to the child tables (foreign keys cannot be turned off
   * inside the migrations' transaction), so it edits the table's stored definition, SQLite's
   * documented way for a change no stored row can break (lang_altertable.html, section 7), with
   * schema edits allowed for the migrations (connect.ts withSqliteSchemaEdits).
   */
  widenInCheck(db: Kysely<any>, change: WidenInCheck): Promise<void>;
  /**
   * LISTEN/NOTIFY exists: `notify` pushes `payload` on `channel` to every listening session
   * when `trx` commits. Without it (SQLite) notify does nothing and listeners poll.
   */
  readonly supportsNotify: boolean;
  notify(trx: Kysely<any> | Transaction<any>, channel: string, payload: string): Promise<void>;
  /**
   * The same push as an expression, for a RETURNING list: sent once (identical notifications of
   * one transaction are one) if the statement changed a row, when its transaction commits. A
   * statement run on its own then wakes its listeners in its own round trip. SQL null without NOTIFY.
   */
  notifyExpression(channel: string, payload: string): RawBuilder<unknown>;
  /**
   * A number read on `db`'s connection that changes whenever another connection commits (SQLite's
   * data_version; see sqlite-commit-watcher.ts), or null where the dialect pushes instead.
   */
  foreignCommitVersion(db: Kysely<any>): Promise<number | null>;
}

/** A widened `column in (…)` CHECK constraint: the values it took, and those it takes now. */
export interface WidenInCheck {
  readonly table: string;
  /** Its name on PostgreSQL (an inline column check is `<table>_<column>_check`). */
  readonly constraint: string;
  readonly column: string;
  /** The values it allows now, in the order written (on SQLite the text must match the stored definition). */
  readonly values: readonly string[];
  /** The values added. */
  readonly added: readonly string[];
}

export interface TriggerValue {
  readonly triggerId: number;
  /** JSON text, or a sealed value in the form this dialect stores it. */
  readonly json: StoredValue;
}

/** The batch as one JSON object keyed by trigger id (ids are integers: no escaping needed). */
function jsonObjectByTrigger(values: readonly TriggerValue[]): string {
  return `{${values.map((value) => `"${value.triggerId}":${Keyring.textForm(value.json)}`).join(',')}}`;
}

export const postgresAdapter: DialectAdapter = {
  name: 'postgres',
  supportsRowLocks: true,
  supportsWritingCtes: true,
  concurrentWrites: 2,
  maxBindParameters: 60_000,
  types: { json: 'jsonb', time: 'timestamptz', bigint: 'bigint' },
  sealedEventForm: 'text',
  parameter: (position) => `$${position}`,
  lockSkippingLocked: (query) => query.forUpdate().skipLocked(),
  lockForUpdate: (query) => query.forUpdate(),
  lockForShare: (query) => query.forShare(),
  // One jsonb parameter: PostgreSQL looks a key up in a jsonb object by binary search.
  stageTriggerValues: async (_trx, values) => {
    const only = onlyValue(values);
    if (only !== undefined) return () => sql`cast(${Keyring.textForm(only)} as jsonb)`;
    const byTrigger = jsonObjectByTrigger(values);
    return (triggerId) => sql`(cast(${byTrigger} as jsonb) -> cast(${triggerId} as text))`;
  },
  idIn: (column, ids) => sql<SqlBool>`${sql.ref(column)} = any(cast(${[...ids]} as bigint[]))`,
  keyVersionPairs: (pairs) =>
    sql`(select * from unnest(cast(${pairs.map(([key]) => key)} as text[]), cast(${pairs.map(([, version]) => version)} as bigint[])) as pairs (key, version))`,
  jsonParam: <T extends StoredValue>(value: T) => sql<T>`cast(${Keyring.textForm(value)} as jsonb)`,
  // SQLSTATE class 22 is "data exception" (22P02 invalid JSON, 22P05 untranslatable character,
  // 22003 out of range, …); 54000 is "program limit exceeded" (a jsonb value too large).
  refusesValues: (error) => {
    const code = errorCode(error);
    return code !== null && (code.startsWith('22') || code === '54000');
  },
  // SQLSTATE class 08 is "connection exception"; 57P01-57P03: the server shutting down or
  // starting; class 53 "insufficient resources" (53100 disk full, 53200 out of memory, 53300 too
  // many connections); 25006: a read-only transaction, what a standby (a demoted primary) answers.
  unavailable: (error) => {
    const code = errorCode(error);
    if (code !== null && (NETWORK_ERRORS.has(code) || code.startsWith('08') || code.startsWith('53') || /^57P0[123]$/.test(code) || code === '25006'))
      return true;
    // What pg raises itself for a connection that went away, without a code.
    return error instanceof Error && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(error.message);
  },
  hasTable: async (db, table) => (await sql<{ present: boolean }>`select to_regclass(${table}) is not null as present`.execute(db)).rows[0]?.present === true,
  widenInCheck: async (db, { table, constraint, column, values, added }) => {
    const list = [...values, ...added].map((value) => `'${value}'`).join(', ');
    await sql.raw(`alter table ${table} drop constraint ${constraint}, add constraint ${constraint} check (${column} in (${list}))`).execute(db);
  },
  supportsNotify: true,
  // Inside a transaction the driver sends it with the COMMIT (see postgres-driver.ts).
  notify: async (trx, channel, payload) => {
    await trx.executeQuery(CompiledQuery.raw(PG_NOTIFY_SQL, [channel, payload]));
  },
  notifyExpression: (channel, payload) => sql`pg_notify(${channel}, ${sql.raw(SCHEMA_TAG_SQL)}${payload})`,
  foreignCommitVersion: async () => null,
};

export const sqliteAdapter: DialectAdapter = {
  name: 'sqlite',
  supportsRowLocks: false,
  supportsWritingCtes: false,
  concurrentWrites: 1,
  maxBindParameters: 30_000,
  types: { json: 'text', time: 'text', bigint: 'integer' },
  sealedEventForm: 'bytes',
  parameter: () => '?',
  lockSkippingLocked: (query) => query,
  lockForUpdate: (query) => query,
  lockForShare: (query) => query,
  // SQLite scans a JSON object's keys to look one up, so a JSON parameter would cost
  // batch x batch; a temp table (private to this connection) keyed by trigger id is a lookup.
  stageTriggerValues: async (trx, values) => {
    const only = onlyValue(values);
    // Text is checked to be JSON (and minified); sealed bytes are written as they are.
    if (only !== undefined) return () => (typeof only === 'string' ? sql`json(${only})` : sql`${only}`);
    await sql`create temp table if not exists deferflow_trigger_value (trigger_id integer primary key, json text not null)`.execute(trx);
    await sql`delete from temp.deferflow_trigger_value`.execute(trx);
    if (values.every((value) => typeof value.json === 'string')) {
      // JSON text: the batch is one JSON document of [id, value] pairs, one parameter (SQLite
      // parses it: text that is not JSON refuses the batch, which is split to find it). Binding
      // two parameters a value cost a third more of this write at 100,000 distinct events.
      const pairs = `[${values.map((value) => `[${value.triggerId},${value.json as string}]`).join(',')}]`;
      await sql`insert into temp.deferflow_trigger_value (trigger_id, json) select value ->> 0, value -> 1 from json_each(${pairs})`.execute(trx);
      return (triggerId) => sql`(select json from temp.deferflow_trigger_value where trigger_id = ${triggerId})`;
    }
    for (const rows of chunks(values, Math.floor(sqliteAdapter.maxBindParameters / 2))) {
      await sql`insert into temp.deferflow_trigger_value (trigger_id, json) values ${sql.join(rows.map((row) => sql`(${row.triggerId}, ${row.json})`))}`.execute(
        trx,
      );
    }
    return (triggerId) => sql`(select iif(typeof(json) = 'blob', json, json(json)) from temp.deferflow_trigger_value where trigger_id = ${triggerId})`;
  },
  // One JSON parameter rather than one per id: the statement's text (and so SQLite's prepared
  // statement, and kysely's compiling) is the same for every batch, and no batch is too large.
  idIn: (column, ids) => sql<SqlBool>`${sql.ref(column)} in (select value from json_each(${JSON.stringify(ids)}))`,
  keyVersionPairs: (pairs) => sql`(select value ->> 0 as key, value ->> 1 as version from json_each(${JSON.stringify(pairs)}))`,
  jsonParam: <T extends StoredValue>(value: T) => sql<T>`${value}`,
  hasTable: async (db, table) => (await sql`select 1 from sqlite_master where type = 'table' and name = ${table}`.execute(db)).rows.length > 0,
  widenInCheck: async (db, { table, column, values, added }) => {
    const stored = await sql<{ sql: string }>`select sql from sqlite_master where type = 'table' and name = ${table}`.execute(db);
    const definition = stored.rows[0]?.sql ?? '';
    // The list as written, whatever whitespace (a line break) stands between its values.
    const written = new RegExp(`(check \\(${column} in \\(${values.map((value) => `'${value}'`).join(',\\s*')})(\\)\\))`);
    const found = definition.match(written);
    if (!found || definition.split(found[0]).length !== 2) {
      throw new MigrationFailedError(
        `cannot widen the check on ${table}.${column}: its stored definition does not hold exactly one check (${column} in (${values.join(', ')}))`,
      );
    }
    const widened = definition.replace(written, `$1, ${added.map((value) => `'${value}'`).join(', ')}$2`);
    const version = (await sql<{ schema_version: number }>`pragma schema_version`.execute(db)).rows[0]!.schema_version;
    await sql`pragma writable_schema = on`.execute(db);
    await sql`update sqlite_master set sql = ${widened} where type = 'table' and name = ${table}`.execute(db);
    // A new schema version makes every connection, this one too, read the definition again.
    await sql.raw(`pragma schema_version = ${version + 1}`).execute(db);
    await sql`pragma writable_schema = off`.execute(db);
  },
  supportsNotify: false,
  notify: async () => {},
  notifyExpression: () => sql`null`,
  foreignCommitVersion: async (db) => (await sql<{ data_version: number }>`pragma data_version`.execute(db)).rows[0]?.data_version ?? null,
  // The lock held elsewhere past the busy timeout, a full disk (or max_page_count), an I/O error,
  // a file made read-only or gone, memory exhausted; extended codes (SQLITE_IOERR_WRITE, …) too.
  unavailable: (error) => {
    const code = errorCode(error);
    return code !== null && SQLITE_UNAVAILABLE.some((unavailable) => code === unavailable || code.startsWith(`${unavailable}_`));
  },
  refusesValues: (error) => {
    const code = errorCode(error);
    if (code === 'SQLITE_TOOBIG' || code === 'SQLITE_MISMATCH') return true;
    // SQLite's JSON functions raise plain SQLITE_ERROR for text that is not JSON.
    return code === 'SQLITE_ERROR' && /malformed JSON|JSON cannot hold BLOB/i.test((error as Error).message);
  },
};

const SQLITE_UNAVAILABLE = ['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_FULL', 'SQLITE_IOERR', 'SQLITE_READONLY', 'SQLITE_CANTOPEN', 'SQLITE_NOMEM'];

/** Node's codes for a connection that could not be made or was lost. */
const NETWORK_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND']);

function errorCode(error: unknown): string | null {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? code : null;
}

/** The value every one of `values` holds, if they all hold the same (sealed values shared by identity); undefined otherwise. */
function onlyValue(values: readonly TriggerValue[]): StoredValue | undefined {
  const first = values[0]?.json;
  if (first === undefined) return undefined;
  for (const value of values) if (value.json !== first) return undefined;
  return first;
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const result: T[][] = [];
  for (let start = 0; start < items.length; start += size) result.push(items.slice(start, start + size));
  return result;
}
