import type { Logger } from 'pino';
import type { Database } from './connect.ts';
import { describeThrown } from '../vocabulary/errors.ts';
import { PostgresListener } from './postgres-listener.ts';
import { SqliteCommitWatcher } from './sqlite-commit-watcher.ts';

/** Channels deferflow NOTIFYs on: signal sends (`<version> <key>`) and daemon wake-ups (`triggerer`, `worker`, `scheduler`). */
export const SIGNAL_CHANNEL = 'deferflow_signal';
export const WAKE_CHANNEL = 'deferflow_wake';
const CHANNELS = [SIGNAL_CHANNEL, WAKE_CHANNEL] as const;
export type NotificationChannel = (typeof CHANNELS)[number];

export interface NotificationHubOptions {
  /** How long a LISTEN session waits for its own probe before push is judged not to work, ms. @default 5000 */
  readonly probeTimeoutMs?: number;
  /** The LISTEN session stays this long after the last subscriber leaves, ms. @default 30000 */
  readonly lingerMs?: number;
}

type Handler = (payload: string) => void;

/**
 * The one PostgreSQL LISTEN session of a database handle, shared by everything in the process
 * that wants pushes (the signal service, the daemons' wake-ups). Pushes are hints: whoever
 * subscribes still reads the tables, and on `catchUp` (a first connect or a reconnect) must
 * read what it may have missed. A NOTIFY probe sent through the pool checks that the pushes
 * really arrive (behind a transaction-mode pooler they do not): `pushWorks` says so, and a
 * warning is logged once when they do not. SQLite has no NOTIFY: a file database's handle
 * watches for commits by other processes instead (SqliteCommitWatcher), which carry no payload,
 * so each one calls every subscriber's `catchUp`; `pushWorks` stays false there (nothing proves
 * the file system reports changes), and subscribers keep their polls.
 */
export class NotificationHub {
  static readonly #hubs = new WeakMap<object, NotificationHub>();

  static of(database: Database, log: Logger, options: NotificationHubOptions = {}): NotificationHub {
    let hub = NotificationHub.#hubs.get(database.db);
    if (!hub) {
      hub = new NotificationHub(database, log, options);
      NotificationHub.#hubs.set(database.db, hub);
    }
    return hub;
  }

  /** Closes the LISTEN session of `db`'s hub, if it has one (the database is closing). */
  static async closeFor(db: object): Promise<void> {
    const hub = NotificationHub.#hubs.get(db);
    NotificationHub.#hubs.delete(db);
    await hub?.close();
  }

  readonly #database: Database;
  readonly #log: Logger;
  readonly #probeTimeoutMs: number;
  readonly #lingerMs: number;
  readonly #handlers = new Map<NotificationChannel, Set<Handler>>();
  readonly #catchUps = new Set<() => void>();
  #listener: PostgresListener | null = null;
  #commitWatcher: SqliteCommitWatcher | null = null;
  #pushWorks = false;
  #probe: { token: string; timer: NodeJS.Timeout } | null = null;
  #warnedNoPush = false;
  #lingerTimer: NodeJS.Timeout | null = null;
  #disabled = false;

  private constructor(database: Database, log: Logger, options: NotificationHubOptions) {
    this.#database = database;
    this.#log = log;
    this.#probeTimeoutMs = options.probeTimeoutMs ?? 5000;
    this.#lingerMs = options.lingerMs ?? 30_000;
  }

  /** Whether pushes are known to arrive now (LISTEN connected and its probe heard). */
  get pushWorks(): boolean {
    return this.#pushWorks && (this.#listener?.isListening ?? false);
  }

  /**
   * Calls `handler` with each payload NOTIFYed on `channel`, and `catchUp` whenever something
   * may have been missed or was not said (the LISTEN session (re)connected; on SQLite, another
   * process committed), until the returned function is called.
   */
  subscribe(channel: NotificationChannel, handler: Handler, catchUp?: () => void): () => void {
    let set = this.#handlers.get(channel);
    if (!set) {
      set = new Set();
      this.#handlers.set(channel, set);
    }
    const entry: Handler = (payload) => handler(payload);
    set.add(entry);
    if (catchUp) this.#catchUps.add(catchUp);
    if (this.#lingerTimer) clearTimeout(this.#lingerTimer);
    this.#lingerTimer = null;
    this.#start();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      set.delete(entry);
      if (catchUp) this.#catchUps.delete(catchUp);
      this.#maybeStop();
    };
  }

  /** Never LISTENs on this handle again (--no-push): subscribers stay, and poll. */
  disable(): void {
    this.#disabled = true;
    void this.#stop();
  }

  /** Closes the LISTEN session now (subscribers stay, and poll). */
  async close(): Promise<void> {
    if (this.#lingerTimer) clearTimeout(this.#lingerTimer);
    this.#lingerTimer = null;
    await this.#stop();
  }

  #subscribers(): number {
    let count = 0;
    for (const set of this.#handlers.values()) count += set.size;
    return count;
  }

  #catchUp(): void {
    for (const callback of [...this.#catchUps]) callback();
  }

  #start(): void {
    if (this.#disabled) return;
    const { target, adapter, db } = this.#database;
    if (target.dialect === 'sqlite') {
      if (this.#commitWatcher || target.file === ':memory:') return;
      this.#commitWatcher = new SqliteCommitWatcher({
        file: target.file,
        readVersion: () => adapter.foreignCommitVersion(db),
        onCommit: () => this.#catchUp(),
        onWatchFailed: (error) =>
          this.#log.warn(
            { code: 'DF_DATABASE', error: describeThrown(error).error },
            `cannot watch ${target.file}-wal for other processes' commits (${describeThrown(error).error}); their work is found by polling`,
          ),
      });
      void this.#commitWatcher.start();
      return;
    }
    if (this.#listener || !adapter.supportsNotify) return;
    this.#listener = new PostgresListener(target.url, CHANNELS, {
      notification: (channel, payload) => this.#heard(channel as NotificationChannel, payload),
      listening: () => {
        this.#catchUp();
        void this.#sendProbe();
      },
      lost: (error, retryInMs) => {
        this.#pushWorks = false;
        this.#log.warn(
          { code: 'DF_DATABASE', error: describeThrown(error).error, retry_in_ms: retryInMs },
          `the LISTEN connection was lost (${describeThrown(error).error}); reconnecting in ${retryInMs} ms, polling meanwhile`,
        );
      },
    });
    this.#listener.start();
  }

  #maybeStop(): void {
    if (this.#subscribers() > 0 || (!this.#listener && !this.#commitWatcher) || this.#lingerTimer) return;
    // Nothing listens: the session goes after a while (the next subscriber may come soon).
    this.#lingerTimer = setTimeout(() => {
      this.#lingerTimer = null;
      if (this.#subscribers() === 0) void this.#stop();
    }, this.#lingerMs);
    this.#lingerTimer.unref();
  }

  async #stop(): Promise<void> {
    this.#commitWatcher?.close();
    this.#commitWatcher = null;
    const listener = this.#listener;
    this.#listener = null;
    this.#pushWorks = false;
    if (this.#probe) clearTimeout(this.#probe.timer);
    this.#probe = null;
    await listener?.close();
  }

  #heard(channel: NotificationChannel, payload: string): void {
    if (payload.startsWith('probe ')) {
      if (this.#probe && payload === `probe ${this.#probe.token}`) {
        clearTimeout(this.#probe.timer);
        this.#probe = null;
        this.#pushWorks = true;
      }
      return;
    }
    for (const handler of [...(this.#handlers.get(channel) ?? [])]) handler(payload);
  }

  /** NOTIFY through the pool (another session): heard on the LISTEN session only where push really works. */
  async #sendProbe(): Promise<void> {
    if (this.#probe) clearTimeout(this.#probe.timer);
    const token = `${process.pid}-${Math.random().toString(36).slice(2)}`;
    const timer = setTimeout(() => {
      if (this.#probe?.token !== token) return;
      this.#probe = null;
      this.#pushWorks = false;
      if (!this.#warnedNoPush) {
        this.#warnedNoPush = true;
        this.#log.warn(
          { code: 'DF_DATABASE' },
          'PostgreSQL LISTEN/NOTIFY does not reach this process (behind a transaction-mode pooler such as PgBouncer, LISTEN cannot work); signals and wake-ups are found by polling',
        );
      }
    }, this.#probeTimeoutMs);
    timer.unref();
    this.#probe = { token, timer };
    try {
      await this.#database.adapter.notify(this.#database.db, SIGNAL_CHANNEL, `probe ${token}`);
    } catch {
      // The database is down: the LISTEN connection is lost too, and reconnecting probes again.
    }
  }
}
