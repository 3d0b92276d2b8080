import BetterSqlite3 from 'better-sqlite3';
import { CompiledQuery, Kysely, PostgresDialect, SqliteDialect, SqliteDriver, type DatabaseConnection, type Driver } from 'kysely';
import pg from 'pg';
import { parseDatabaseUrl, type DatabaseTarget } from './database-url.ts';
import { postgresAdapter, sqliteAdapter, type DialectAdapter } from './dialect.ts';
import type { DatabaseSchema } from './schema.ts';

export interface Database {
  readonly db: Kysely<DatabaseSchema>;
  readonly adapter: DialectAdapter;
  readonly target: DatabaseTarget;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL pool size. */
  readonly poolSize?: number;
}

export function openDatabase(url: string, options: OpenDatabaseOptions = {}): Database {
  const target = parseDatabaseUrl(url);
  const db =
    target.dialect === 'sqlite'
      ? new Kysely<DatabaseSchema>({ dialect: new ImmediateSqliteDialect(openSqlite(target.file)) })
      : new Kysely<DatabaseSchema>({ dialect: new PostgresDialect({ pool: openPostgresPool(target.url, options.poolSize ?? 10) }) });
  const adapter = target.dialect === 'sqlite' ? sqliteAdapter : postgresAdapter;
  return { db, adapter, target, close: () => db.destroy() };
}

function openSqlite(file: string): BetterSqlite3.Database {
  // busy_timeout: another process (a worker, a second triggerer) may hold the write lock
  // for a short transaction; wait for it instead of failing.
  const sqlite = new BetterSqlite3(file, { timeout: 5000 });
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  return sqlite;
}

const PG_INT8 = 20;
const PG_JSON = 114;
const PG_JSONB = 3802;

function openPostgresPool(connectionString: string, max: number): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
        // ids and counts are bigint; they stay far below 2^53.
        if (oid === PG_INT8) return (value: string) => Number(value);
        // JSON columns are read as text on both dialects.
        if (oid === PG_JSON || oid === PG_JSONB) return (value: string) => value;
        return pg.types.getTypeParser(oid, format as 'text');
      }) as typeof pg.types.getTypeParser,
    },
  });
  // An idle client that loses its connection must not crash the process; the next
  // query gets a fresh client.
  pool.on('error', () => {});
  return pool;
}

/**
 * Write transactions start with BEGIN IMMEDIATE so they take SQLite's write lock up front:
 * a plain BEGIN that reads first and writes later fails with SQLITE_BUSY instead of waiting
 * when another process wrote in between.
 */
class ImmediateSqliteDialect extends SqliteDialect {
  readonly #database: BetterSqlite3.Database;

  constructor(database: BetterSqlite3.Database) {
    super({ database });
    this.#database = database;
  }

  override createDriver(): Driver {
    return new ImmediateSqliteDriver({ database: this.#database });
  }
}

class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
}
