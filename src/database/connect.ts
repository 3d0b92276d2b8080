import type BetterSqlite3 from 'better-sqlite3';
import { setTimeout as delay } from 'node:timers/promises';
import { CompiledQuery, Kysely as KyselyClass, PostgresDialect, SqliteAdapter, SqliteDialect, SqliteDriver } from './kysely.ts';
import type { DatabaseConnection, DatabaseIntrospector, Kysely, DialectAdapter as KyselyAdapter, Driver, PostgresDialectConfig, QueryResult } from 'kysely';
import type pg from 'pg';
import { betterSqlite3Package, pgPackage } from '../vocabulary/lazy-package.ts';
import { existsSync } from 'node:fs';
import { DatabaseNotMigratedError } from '../vocabulary/errors.ts';
import { parseDatabaseUrl, redactDatabaseUrl, type DatabaseTarget } from './database-url.ts';
import { postgresAdapter, sqliteAdapter, type DialectAdapter } from './dialect.ts';
import { CurrentSchemaIntrospector } from './postgres-introspector.ts';
import { NotifyAtCommitPostgresDriver } from './postgres-driver.ts';
import type { DatabaseSchema } from './schema.ts';
import { NotificationHub } from './notification-hub.ts';
import { closeLivenessLocksFor } from './liveness-locks.ts';
import { Keyring } from './encryption/keyring.ts';

/** An open database: its kysely instance, its dialect's adapter, its keyring, and close(). */
export interface Database {
  /** The kysely instance, typed with deferflow's tables. */
  readonly db: Kysely<DatabaseSchema>;
  /** The dialect's adapter: every SQL difference between SQLite and PostgreSQL. */
  readonly adapter: DialectAdapter;
  /** What the URL named: the dialect and where. */
  readonly target: DatabaseTarget;
  /** The keys that seal trigger kwargs, next_kwargs and event payloads as they are written (Keyring.none: none). */
  readonly keyring: Keyring;
  /** Closes the connections. */
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL pool size. */
  readonly poolSize?: number;
  /**
   * Refuse a SQLite file that does not exist (DF_DATABASE_NOT_MIGRATED) instead of creating an
   * empty one: every command but `db migrate` and standalone, which create it.
   */
  readonly mustExist?: boolean;
  /** Encryption at rest (see encryption/keyring.ts). @default Keyring.none */
  readonly keyring?: Keyring;
}

/** Opens a database by URL (sqlite:PATH or postgres://…), with the keyring that opens encrypted values. */
export function openDatabase(url: string, options: OpenDatabaseOptions = {}): Database {
  const target = parseDatabaseUrl(url);
  if (options.mustExist && target.dialect === 'sqlite' && target.file !== ':memory:' && !existsSync(target.file)) {
    throw new DatabaseNotMigratedError(
      `the SQLite database ${target.file} (${redactDatabaseUrl(url)}) does not exist; check --db (or DEFERFLOW_DATABASE_URL), or create it with \`deferflow db migrate --db ${redactDatabaseUrl(url)}\``,
    );
  }
  const sqlite = target.dialect === 'sqlite' ? openSqlite(target.file) : null;
  const db = sqlite
    ? new KyselyClass<DatabaseSchema>({ dialect: new ImmediateSqliteDialect(sqlite) })
    : new KyselyClass<DatabaseSchema>({ dialect: new CurrentSchemaPostgresDialect({ pool: openPostgresPool(target.url, options.poolSize ?? 10) }) });
  if (sqlite) sqliteHandles.set(db, sqlite);
  const adapter = target.dialect === 'sqlite' ? sqliteAdapter : postgresAdapter;
  return {
    db,
    adapter,
    target,
    keyring: options.keyring ?? Keyring.none,
    close: async () => {
      await NotificationHub.closeFor(db);
      await closeLivenessLocksFor(db);
      await db.destroy();
    },
  };
}

/** The better-sqlite3 connection under each SQLite database's Kysely (for withSqliteSchemaEdits). */
const sqliteHandles = new WeakMap<object, BetterSqlite3.Database>();

/**
 * Runs `work` (the migrations) with SQLite's stored schema editable: better-sqlite3 opens
 * connections in SQLite's defensive mode, which forbids `PRAGMA writable_schema`, and a migration
 * that loosens a CHECK constraint edits the stored definition (see DialectAdapter.loosenCheck).
 * Only for the migrations' own transaction; other databases run `work` as it is.
 */
export async function withSqliteSchemaEdits<T>(db: object, work: () => Promise<T>): Promise<T> {
  const sqlite = sqliteHandles.get(db);
  if (!sqlite) return work();
  sqlite.unsafeMode(true);
  try {
    return await work();
  } finally {
    sqlite.unsafeMode(false);
  }
}

/** How long a statement or transaction waits for another process's write lock before failing. */
const SQLITE_BUSY_TIMEOUT_MS = 5000;

function openSqlite(file: string): BetterSqlite3.Database {
  // Opening may wait for another process's lock (switching to WAL takes it), synchronously:
  // the process is starting.
  const sqlite = new (betterSqlite3Package())(file, { timeout: SQLITE_BUSY_TIMEOUT_MS });
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  // From here on, waits for the lock happen between tries, on the event loop (see
  // LockWaitingSqliteConnection); the opening pragmas above may wait synchronously.
  sqlite.pragma('busy_timeout = 0');
  cachePreparedStatements(sqlite);
  return sqlite;
}

/** Distinct SQL texts kept prepared; the runtime issues a few dozen shapes over and over. */
const SQLITE_STATEMENT_CACHE = 256;

/**
 * kysely prepares every statement anew; on a busy runtime that was a tenth of all CPU time.
 * better-sqlite3 statements are reusable (SQLite re-prepares one itself after a schema change),
 * and this connection never steps two uses of one statement at once (kysely runs one query at
 * a time per connection and does not stream here), so one prepared statement per SQL text is
 * kept, least recently used dropped first.
 */
function cachePreparedStatements(sqlite: BetterSqlite3.Database): void {
  const prepare = sqlite.prepare.bind(sqlite);
  const cache = new Map<string, BetterSqlite3.Statement>();
  sqlite.prepare = ((source: string) => {
    let statement = cache.get(source);
    if (statement) {
      cache.delete(source);
    } else {
      statement = prepare(source);
      if (cache.size >= SQLITE_STATEMENT_CACHE) cache.delete(cache.keys().next().value!);
    }
    cache.set(source, statement);
    return statement;
  }) as typeof sqlite.prepare;
}

const PG_INT8 = 20;
const PG_JSON = 114;
const PG_JSONB = 3802;

function openPostgresPool(connectionString: string, max: number): pg.Pool {
  const pool = new (pgPackage().Pool)({
    connectionString,
    max,
    // Which process a session serves, in pg_stat_activity (the listener and lock sessions say so too).
    application_name: `deferflow ${process.pid}`,
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
        // ids and counts are bigint; they stay far below 2^53.
        if (oid === PG_INT8) return (value: string) => Number(value);
        // JSON columns are read as text on both dialects.
        if (oid === PG_JSON || oid === PG_JSONB) return (value: string) => value;
        return pgPackage().types.getTypeParser(oid, format as 'text');
      }) as typeof pg.types.getTypeParser,
    },
  });
  // An idle client that loses its connection must not crash the process; the next
  // query gets a fresh client.
  pool.on('error', () => {});
  // Nor one checked out between two statements (a transaction's, when the server restarts):
  // the pool has no listener on it then, so its error would be uncaught. The statement that
  // needed it fails with the error, and the pool drops the client when it comes back.
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

/**
 * PostgreSQL, introspected in the current schema only (see postgres-introspector.ts), a
 * transaction's notifications sent with its COMMIT (see postgres-driver.ts).
 */
class CurrentSchemaPostgresDialect extends PostgresDialect {
  readonly #config: PostgresDialectConfig;

  constructor(config: PostgresDialectConfig) {
    super(config);
    this.#config = config;
  }

  override createDriver(): Driver {
    return new NotifyAtCommitPostgresDriver(this.#config);
  }

  override createIntrospector(db: Kysely<any>): DatabaseIntrospector {
    return new CurrentSchemaIntrospector(db);
  }
}

/**
 * Write transactions start with BEGIN IMMEDIATE so they take SQLite's write lock up front:
 * a plain BEGIN that reads first and writes later fails with SQLITE_BUSY instead of waiting
 * when another process wrote in between.
 *
 * SQLite runs DDL inside transactions, so the adapter says so: kysely's migrator then runs the
 * migrations in one such transaction, which is what serializes concurrent `db migrate` runs
 * (kysely's own SQLite adapter claims no transactional DDL and takes no lock at all).
 */
class ImmediateSqliteDialect extends SqliteDialect {
  readonly #database: BetterSqlite3.Database;

  constructor(database: BetterSqlite3.Database) {
    super({ database });
    this.#database = database;
  }

  override createDriver(): Driver {
    return new ImmediateSqliteDriver({ database: this.#database }, this.#database);
  }

  override createAdapter(): KyselyAdapter {
    return new TransactionalDdlSqliteAdapter();
  }
}

class TransactionalDdlSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

class ImmediateSqliteDriver extends SqliteDriver {
  readonly #sqlite: BetterSqlite3.Database;
  /** kysely's one SQLite connection, wrapped (made at the first acquire, which creates it). */
  #lockWaiting: LockWaitingSqliteConnection | null = null;

  constructor(config: ConstructorParameters<typeof SqliteDriver>[0], sqlite: BetterSqlite3.Database) {
    super(config);
    this.#sqlite = sqlite;
  }

  override async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await super.acquireConnection();
    this.#lockWaiting ??= new LockWaitingSqliteConnection(connection, this.#sqlite);
    return this.#lockWaiting;
  }

  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
}

/** The first pause after SQLITE_BUSY; each next one doubles, up to the last. */
const SQLITE_LOCK_FIRST_PAUSE_MS = 1;
/**
 * The longest pause between two tries for the lock: the delay between another process letting
 * go and this one noticing (SQLite's own busy handler sleeps up to 100 ms), against a failed try
 * (a few µs) every this many ms while it waits.
 */
const SQLITE_LOCK_LAST_PAUSE_MS = 4;

/**
 * better-sqlite3 waits out busy_timeout synchronously, which would freeze this process's event
 * loop (every trigger, every timer) while another process holds the write lock, for up to the
 * whole timeout, and deadlock two connections of one process outright. So the connection asks
 * for the lock without waiting (busy_timeout 0) and a statement refused with SQLITE_BUSY is tried
 * again after a short pause on the event loop, until the lock has been taken for
 * SQLITE_BUSY_TIMEOUT_MS.
 *
 * Only outside a transaction: there a refused statement is its own transaction, so it did
 * nothing and can be run again, and BEGIN IMMEDIATE is such a statement. Inside one, this
 * connection already holds the write lock (every transaction begins IMMEDIATE), so in WAL mode
 * nothing it runs waits for a lock. kysely's connection mutex keeps any other statement of this
 * process off the connection during the pauses.
 */
class LockWaitingSqliteConnection implements DatabaseConnection {
  readonly #connection: DatabaseConnection;
  readonly #sqlite: BetterSqlite3.Database;
  /**
   * Since when statements have found the lock taken, until one gets it. The timeout counts from
   * there for every statement, not from each one's own first try: the loop stays free during a
   * wait, so the daemons' loops queue statements behind it, and each waiting 5 s in turn would
   * keep a write queued behind them (an outcome, say) from failing and being reported for a
   * minute and more. So once the lock has been held elsewhere for the timeout, every statement
   * fails at its first refusal, as all do while a PostgreSQL server is unreachable.
   */
  #lockedSince: number | null = null;

  constructor(connection: DatabaseConnection, sqlite: BetterSqlite3.Database) {
    this.#connection = connection;
    this.#sqlite = sqlite;
  }

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    if (this.#sqlite.inTransaction) return this.#connection.executeQuery(query);
    for (let pauseMs = SQLITE_LOCK_FIRST_PAUSE_MS; ; pauseMs = Math.min(pauseMs * 2, SQLITE_LOCK_LAST_PAUSE_MS)) {
      try {
        const result = await this.#connection.executeQuery<R>(query);
        this.#lockedSince = null;
        return result;
      } catch (error) {
        if (!String((error as { code?: unknown }).code).startsWith('SQLITE_BUSY')) throw error;
        this.#lockedSince ??= Date.now();
        if (Date.now() - this.#lockedSince >= SQLITE_BUSY_TIMEOUT_MS) throw error;
      }
      await delay(pauseMs);
    }
  }

  streamQuery<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    return this.#connection.streamQuery(query, chunkSize);
  }
}
