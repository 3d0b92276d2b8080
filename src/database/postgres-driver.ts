import { CompiledQuery, PostgresDriver } from './kysely.ts';
import type { DatabaseConnection, QueryResult, TransactionSettings } from 'kysely';
import { pgPackage } from '../vocabulary/lazy-package.ts';

/** The session's schema, as both sides of a notification spell it. */
const SESSION_SCHEMA_SQL = "coalesce(current_schema(), '')";

/**
 * What every payload is prefixed with, as SQL: the sender's schema and a space. NOTIFY's channels
 * belong to the whole database, so deployments in two schemas of one database would hear each
 * other's wake-ups and signals; a listener passes on only those of its own schema
 * (postgres-listener.ts).
 */
export const SCHEMA_TAG_SQL = `${SESSION_SCHEMA_SQL} || ' ' || `;

/** What a listener reads of its own session to know the prefix its schema's payloads carry. */
export const OWN_SCHEMA_SQL = `select ${SESSION_SCHEMA_SQL} as schema`;

/**
 * The one statement the PostgreSQL adapter's notify runs (see dialect.ts): this driver
 * recognises it by its text.
 */
export const PG_NOTIFY_SQL = `select pg_notify($1, ${SCHEMA_TAG_SQL}$2)`;

/**
 * How long a transaction of deferflow's may sit idle between two statements before PostgreSQL ends
 * its session. A live process never pauses that long inside a transaction (its statements follow
 * one another within a turn or two of its loop, even on a machine saturated by CPU hogs); a
 * frozen one (SIGSTOP, a stalled VM, a partition while its session lingers) would otherwise keep
 * the transaction's row locks for as long as it stays frozen, and the peer that takes its work
 * over at the heartbeat threshold would wait on those locks until it thaws. Shorter than the
 * default thresholds (10 s), so the locks are gone by the time a peer comes for them. SET LOCAL:
 * it holds for the transaction only, so behind a pooler in transaction mode it reaches no other
 * client's session.
 */
export const FROZEN_TRANSACTION_TIMEOUT_MS = 5_000;
const FENCE_FROZEN_TRANSACTION_SQL = `set local idle_in_transaction_session_timeout = ${FROZEN_TRANSACTION_TIMEOUT_MS}`;

/**
 * kysely's PostgreSQL driver, with every transaction fenced against a frozen process (see
 * FROZEN_TRANSACTION_TIMEOUT_MS), and a transaction's notifications sent with its COMMIT, in one
 * round trip instead of one each. PostgreSQL delivers a NOTIFY made in a transaction only when it
 * commits (and drops it on rollback), so sending it with the COMMIT changes nothing listeners
 * can see; each transaction that wakes a daemon (a batch of events, a deferral joining an
 * identical wait) saves a round trip. Outside a transaction a notify runs as it is; a write made
 * in one statement carries its notification in its RETURNING list instead (see wake.ts).
 */
export class NotifyAtCommitPostgresDriver extends PostgresDriver {
  readonly #wrapped = new WeakMap<DatabaseConnection, NotifyDeferringConnection>();

  override async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await super.acquireConnection();
    let wrapped = this.#wrapped.get(connection);
    if (!wrapped) {
      wrapped = new NotifyDeferringConnection(connection);
      this.#wrapped.set(connection, wrapped);
    }
    return wrapped;
  }

  override async releaseConnection(connection: DatabaseConnection): Promise<void> {
    // kysely's driver releases the connection it made, which is the one this one wraps.
    await super.releaseConnection(inner(connection) as Parameters<PostgresDriver['releaseConnection']>[0]);
  }

  override async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    if (settings.isolationLevel || settings.accessMode) await super.beginTransaction(connection, settings);
    // The fence goes with the BEGIN, as one simple query: one round trip, as before.
    else await inner(connection).executeQuery(CompiledQuery.raw(`begin; ${FENCE_FROZEN_TRANSACTION_SQL}`));
    if (connection instanceof NotifyDeferringConnection) connection.deferNotifications();
  }

  override async commitTransaction(connection: DatabaseConnection): Promise<void> {
    const notifications = connection instanceof NotifyDeferringConnection ? connection.takeNotifications() : [];
    if (notifications.length === 0) {
      await super.commitTransaction(connection);
      return;
    }
    // Without parameters the statements go as one simple query: one round trip, run in order.
    const { escapeLiteral } = pgPackage();
    const notifying = notifications.map(([channel, payload]) => `pg_notify(${escapeLiteral(channel)}, ${SCHEMA_TAG_SQL}${escapeLiteral(payload)})`).join(', ');
    await inner(connection).executeQuery(CompiledQuery.raw(`select ${notifying}; commit`));
  }

  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    if (connection instanceof NotifyDeferringConnection) connection.takeNotifications();
    await super.rollbackTransaction(connection);
  }
}

function inner(connection: DatabaseConnection): DatabaseConnection {
  return connection instanceof NotifyDeferringConnection ? connection.inner : connection;
}

/** A pooled connection that, inside a transaction, keeps its notifications for the COMMIT. */
class NotifyDeferringConnection implements DatabaseConnection {
  readonly inner: DatabaseConnection;
  /** [channel, payload] of each notification made since BEGIN; null outside a transaction. */
  #deferred: [string, string][] | null = null;

  constructor(connection: DatabaseConnection) {
    this.inner = connection;
  }

  deferNotifications(): void {
    this.#deferred = [];
  }

  /** The notifications made since BEGIN; the transaction is ending. */
  takeNotifications(): [string, string][] {
    const deferred = this.#deferred ?? [];
    this.#deferred = null;
    return deferred;
  }

  // Not async: every statement passes here, and the pooled connection's own promise goes back as it is.
  executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    if (this.#deferred !== null && query.sql === PG_NOTIFY_SQL) {
      this.#deferred.push([String(query.parameters[0]), String(query.parameters[1])]);
      return Promise.resolve({ rows: [] });
    }
    return this.inner.executeQuery(query);
  }

  streamQuery<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    return this.inner.streamQuery(query, chunkSize);
  }
}
