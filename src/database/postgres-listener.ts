import type pg from 'pg';
import { pgPackage } from '../vocabulary/lazy-package.ts';
import { DatabaseError, InvalidOptionError } from '../vocabulary/errors.ts';
import { OWN_SCHEMA_SQL } from './postgres-driver.ts';

export interface PostgresListenerEvents {
  /** A notification on one of the channels arrived. */
  notification(channel: string, payload: string): void;
  /** LISTEN is in place (first time, or after a reconnect): what was sent meanwhile must be looked up. */
  listening(): void;
  /** The connection failed or was lost; a reconnect follows after `retryInMs`. */
  lost(error: unknown, retryInMs: number): void;
}

export interface PostgresListenerOptions {
  /** First pause before reconnecting, ms; doubled after each failure. @default 500 */
  readonly minBackoffMs?: number;
  /** Longest pause before reconnecting, ms. @default 30000 */
  readonly maxBackoffMs?: number;
  /** What pg_stat_activity shows for the session. @default `deferflow listen <pid>` */
  readonly applicationName?: string;
}

/**
 * One PostgreSQL session that LISTENs on some channels for as long as it is open, reconnecting with
 * backoff whenever the connection is lost (a server restart, pg_terminate_backend, a network cut).
 * Notifications are only a hint that something changed: whoever uses this still reads the tables
 * after `listening()`, since anything sent while the session was down was not heard.
 */
export class PostgresListener {
  readonly #url: string;
  readonly #channels: readonly string[];
  readonly #events: PostgresListenerEvents;
  readonly #minBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #applicationName: string;
  #client: pg.Client | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  #failures = 0;
  #closed = false;
  #listening = false;
  /** `<schema> `: what a payload sent from this session's schema starts with (see SCHEMA_TAG_SQL); null until read. */
  #ownSchemaTag: string | null = null;

  constructor(url: string, channels: readonly string[], events: PostgresListenerEvents, options: PostgresListenerOptions = {}) {
    for (const channel of channels) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new InvalidOptionError('channel', `${JSON.stringify(channel)} is not a plain identifier`);
    }
    this.#url = url;
    this.#channels = [...channels];
    this.#events = events;
    this.#minBackoffMs = options.minBackoffMs ?? 500;
    this.#maxBackoffMs = options.maxBackoffMs ?? 30_000;
    this.#applicationName = options.applicationName ?? `deferflow listen ${process.pid}`;
  }

  /** Whether the session is connected and LISTENing now. */
  get isListening(): boolean {
    return this.#listening;
  }

  start(): void {
    void this.#connect();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#listening = false;
    const client = this.#client;
    this.#client = null;
    await client?.end().catch(() => {});
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new (pgPackage().Client)({ connectionString: this.#url, application_name: this.#applicationName });
    this.#client = client;
    let failed = false;
    const fail = (error: unknown) => {
      if (failed || this.#closed || this.#client !== client) return;
      failed = true;
      this.#listening = false;
      this.#client = null;
      client.end().catch(() => {});
      const retryInMs = Math.min(this.#maxBackoffMs, this.#minBackoffMs * 2 ** Math.min(this.#failures, 20));
      this.#failures++;
      this.#events.lost(error, retryInMs);
      this.#retryTimer = setTimeout(() => {
        this.#retryTimer = null;
        void this.#connect();
      }, retryInMs);
    };
    client.on('error', fail);
    client.on('end', () => fail(new DatabaseError('the LISTEN connection ended')));
    client.on('notification', (message) => {
      // Another schema's deployment (or, before the schema is known, the catch-up that follows reads anyway).
      const tag = this.#ownSchemaTag;
      const payload = message.payload ?? '';
      if (tag === null || !payload.startsWith(tag) || !this.#channels.includes(message.channel)) return;
      this.#events.notification(message.channel, payload.slice(tag.length));
    });
    try {
      await client.connect();
      for (const channel of this.#channels) await client.query(`LISTEN ${channel}`);
      const { rows } = await client.query<{ schema: string }>(OWN_SCHEMA_SQL);
      this.#ownSchemaTag = `${rows[0]?.schema ?? ''} `;
    } catch (error) {
      fail(error);
      return;
    }
    if (this.#closed || this.#client !== client) {
      await client.end().catch(() => {});
      return;
    }
    this.#failures = 0;
    this.#listening = true;
    this.#events.listening();
  }
}
