import type { Logger } from 'pino';
import type { Database } from '../../database/connect.ts';
import { NotificationHub, SIGNAL_CHANNEL, type NotificationHubOptions } from '../../database/notification-hub.ts';
import { describeThrown, InvalidSignalError } from '../../vocabulary/errors.ts';
import { createLogger } from '../../vocabulary/logging.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';
import { openStores, type Stores } from '../../storage/index.ts';
import { checkSignalKey, checkSignalVersion, signalValueText, type Signal } from '../../model/signal.ts';

/** Called with each signal of its key, in version order, once each. */
export type SignalListener = (signal: Signal) => void | Promise<void>;

/** A listener on a signal key, until unsubscribe(). */
export interface SignalSubscription {
  /** The key listened to. */
  readonly key: string;
  /** The last version handed to the listener (or the one it started after). */
  readonly version: number;
  /** Stops listening; a signal being handed over finishes, none follows. */
  close(): void;
}

/**
 * The safety-net poll of the keys listened for while PostgreSQL's push is known to work. A NOTIFY
 * is not lost while its LISTEN session lives, and a session that reconnects catches up at once:
 * this look guards only against what nobody foresaw, so it is rare. Each is one statement for
 * every process that listens (an idle scheduler with signal-scheduled DAGs, a triggerer with
 * signal waits): at 20 s it was 0.05 of an idle scheduler's 0.5 statements a second.
 */
const SIGNAL_SAFETY_POLL_MS = 60_000;

/** A SignalService's options: how it hears pushes and how often it polls. */
export interface SignalServiceOptions extends NotificationHubOptions {
  /** Between two looks at the database while no push is known to work, ms. @default 1000 */
  readonly pollIntervalMs?: number;
  /** Between two looks while PostgreSQL's push is known to work (the safety net: see SIGNAL_SAFETY_POLL_MS), ms. @default 60000 */
  readonly pushedPollIntervalMs?: number;
}

interface Listening {
  readonly key: string;
  /** Last version handed over; null until the starting point is known. */
  after: number | null;
  readonly listener: SignalListener;
  closed: boolean;
  delivering: Promise<void>;
}

/** Signals read per query while catching up. */
const CATCH_UP_BATCH = 1000;
/** Keys per latest-versions query. */
const KEYS_PER_QUERY = 500;
/** A round woken by a catch-up starts no sooner than this many times the last round's length after it (a tenth of the loop at most). */
const CATCH_UP_SPACING = 9;

/**
 * The notification service of one database handle (AIP-35): sends, lists and listens to signals.
 * The database is the source of truth everywhere; pushes only cut the wait:
 * - every listening process looks at the versions of the keys it listens to once a poll interval
 *   (one query for all its listeners), and reads what is new (one more);
 * - a send from this process wakes its listeners at once (in-process push, both dialects);
 * - on PostgreSQL the process's LISTEN session (NotificationHub) hears every send at its commit
 *   and wakes the listeners. It is subscribed before the first read, so a send between the two
 *   is never lost; it reconnects with backoff, and each reconnect makes a round (catching up);
 *   while its probe says pushes do not arrive (a transaction-mode pooler), polling stays at the
 *   full rate;
 * - on a SQLite file, a commit by another process (a `deferflow signal send` from the shell)
 *   makes a round (see SqliteCommitWatcher; such rounds are spaced, see #catchUpSoon), and the
 *   polls go on at the full rate.
 * Many listeners on a process share it: SignalService.of(database) gives the one for a handle.
 */
export class SignalService {
  static readonly #services = new WeakMap<object, SignalService>();

  /** The service of `database`'s handle, made on first use; `log` is where its warnings go. */
  static of(database: Database, log?: Logger, options: SignalServiceOptions = {}): SignalService {
    let service = SignalService.#services.get(database.db);
    if (!service) {
      service = new SignalService(database, log, options);
      SignalService.#services.set(database.db, service);
    } else if (log && !service.#logGiven) {
      service.#log = log;
      service.#logGiven = true;
    }
    return service;
  }

  readonly #database: Database;
  readonly #storage: Pick<Stores, 'signals'>;
  #log: Logger;
  #logGiven: boolean;
  readonly #pollIntervalMs: number;
  readonly #pushedPollIntervalMs: number;
  readonly #listening = new Map<string, Set<Listening>>();
  #timer: NodeJS.Timeout | null = null;
  #round: Promise<void> | null = null;
  #again = false;
  /** How long the last round took, and when it ended (performance.now()): catch-ups are spaced by it. */
  #lastRoundMs = 0;
  #lastRoundEndedAt = Number.NEGATIVE_INFINITY;
  #catchUpTimer: NodeJS.Timeout | null = null;
  readonly #hubOptions: NotificationHubOptions;
  /** Ends the subscription to pushes; set while anyone listens. */
  #unsubscribe: (() => void) | null = null;
  /** Rounds run so far (what a test or a metric counts). */
  rounds = 0;

  private constructor(database: Database, log: Logger | undefined, options: SignalServiceOptions) {
    this.#database = database;
    this.#storage = openStores(database);
    this.#log = log ?? createLogger({ level: 'warn', format: 'json', stderr: true });
    this.#logGiven = log !== undefined;
    this.#pollIntervalMs = options.pollIntervalMs ?? 1000;
    this.#pushedPollIntervalMs = options.pushedPollIntervalMs ?? SIGNAL_SAFETY_POLL_MS;
    this.#hubOptions = options;
  }

  /** Whether PostgreSQL's push is known to work now (LISTEN connected and its probe heard). */
  get pushWorks(): boolean {
    return this.#unsubscribe !== null && NotificationHub.of(this.#database, this.#log, this.#hubOptions).pushWorks;
  }

  /** Sends `value` (JSON, null by default) on `key`, recording `sentBy` with it (who sent it; null: not recorded); resolves with the version it got. */
  async send(key: string, value: JsonValue = null, sentBy: string | null = null): Promise<number> {
    checkSignalKey(key);
    const version = await this.#storage.signals.sendSignal(key, signalValueText(key, value), Date.now(), sentBy);
    if (this.#listening.has(key)) this.#wakeSoon();
    return version;
  }

  /** The key's latest version; 0 when nothing was ever sent on it. */
  async latestVersion(key: string): Promise<number> {
    checkSignalKey(key);
    return (await this.#storage.signals.latestSignalVersions([key])).get(key) ?? 0;
  }

  /** The key's signals after `sinceVersion` (default 0: all kept), oldest first, at most `limit` (default 1000). */
  async list(key: string, options: { sinceVersion?: number; limit?: number } = {}): Promise<Signal[]> {
    checkSignalKey(key);
    const since = checkSignalVersion(options.sinceVersion ?? 0, 'sinceVersion');
    const limit = options.limit ?? 1000;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new InvalidSignalError(`limit ${JSON.stringify(limit)} is not a whole number above 0`);
    return this.#storage.signals.signalsAfter(new Map([[key, since]]), limit);
  }

  /**
   * Hands `listener` every signal of `key` after `sinceVersion`, in order, each once: those
   * already sent first (a listener that was away catches up), then each new one as it comes.
   * Without sinceVersion it starts after the key's latest version now.
   */
  async listen(key: string, listener: SignalListener, options: { sinceVersion?: number } = {}): Promise<SignalSubscription> {
    checkSignalKey(key);
    if (typeof listener !== 'function') throw new InvalidSignalError(`the listener of signal ${key} is not a function`);
    const since = options.sinceVersion === undefined ? null : checkSignalVersion(options.sinceVersion, 'sinceVersion');
    const entry: Listening = { key, after: since, listener, closed: false, delivering: Promise.resolve() };
    // Registered (and LISTENing) before anything is read: a send in between is heard.
    this.#add(entry);
    if (since === null) {
      try {
        entry.after = await this.latestVersion(key);
      } catch (error) {
        this.#remove(entry);
        throw error;
      }
    }
    this.#wakeSoon();
    return {
      key,
      get version() {
        return entry.after ?? 0;
      },
      close: () => this.#remove(entry),
    };
  }

  #add(entry: Listening): void {
    let set = this.#listening.get(entry.key);
    if (!set) {
      set = new Set();
      this.#listening.set(entry.key, set);
    }
    set.add(entry);
    // Subscribed before anything is read: a send in between is heard.
    this.#unsubscribe ??= NotificationHub.of(this.#database, this.#log, this.#hubOptions).subscribe(
      SIGNAL_CHANNEL,
      (payload) => {
        if (this.#listening.has(payload.slice(payload.indexOf(' ') + 1))) this.#wakeSoon();
      },
      // (Re)connected, or another process committed to the SQLite file: what was sent meanwhile is read now.
      () => this.#catchUpSoon(),
    );
    this.#schedule();
  }

  #remove(entry: Listening): void {
    entry.closed = true;
    const set = this.#listening.get(entry.key);
    set?.delete(entry);
    if (set?.size === 0) this.#listening.delete(entry.key);
    if (this.#listening.size > 0) return;
    this.#stopWaking();
  }

  /** Stops listening altogether (every subscription ends); what was handed over finishes. */
  async close(): Promise<void> {
    for (const set of this.#listening.values()) for (const entry of set) entry.closed = true;
    this.#listening.clear();
    this.#stopWaking();
    await this.#round;
  }

  /** No one listens: no more polls, catch-ups or pushes (a round under way finishes). */
  #stopWaking(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#catchUpTimer) clearTimeout(this.#catchUpTimer);
    this.#catchUpTimer = null;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
  }

  #schedule(): void {
    if (this.#timer || this.#listening.size === 0) return;
    const interval = this.pushWorks ? this.#pushedPollIntervalMs : this.#pollIntervalMs;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#wakeSoon();
    }, interval);
  }

  /**
   * A round for a wake-up that names no key: on SQLite every commit by another process is one
   * (see SqliteCommitWatcher), and a round reads the versions of every key listened to (~5 ms for
   * 10,000 keys). So such rounds are spaced by CATCH_UP_SPACING times the last round's length:
   * however busy the other processes, they take at most a tenth of this loop.
   */
  #catchUpSoon(): void {
    if (this.#catchUpTimer) return;
    const wait = this.#lastRoundEndedAt + CATCH_UP_SPACING * this.#lastRoundMs - performance.now();
    if (wait <= 0) {
      this.#wakeSoon();
      return;
    }
    this.#catchUpTimer = setTimeout(() => {
      this.#catchUpTimer = null;
      this.#wakeSoon();
    }, wait);
  }

  /** Runs a round now (after this turn of the loop, so a burst of wake-ups makes one). */
  #wakeSoon(): void {
    if (this.#round) {
      this.#again = true;
      return;
    }
    this.#round = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.#runRound());
  }

  async #runRound(): Promise<void> {
    const startedAt = performance.now();
    try {
      this.rounds++;
      await this.#lookAndDeliver();
    } catch (error) {
      this.#log.warn({ code: 'DF_DATABASE', error: describeThrown(error).error }, `reading signals failed: ${describeThrown(error).error}; trying again`);
    } finally {
      this.#lastRoundEndedAt = performance.now();
      this.#lastRoundMs = this.#lastRoundEndedAt - startedAt;
      this.#round = null;
      if (this.#timer) clearTimeout(this.#timer);
      this.#timer = null;
      if (this.#again) {
        this.#again = false;
        this.#wakeSoon();
      } else {
        this.#schedule();
      }
    }
  }

  async #lookAndDeliver(): Promise<void> {
    const keys = [...this.#listening.keys()];
    const behind = new Map<string, number>();
    for (let start = 0; start < keys.length; start += KEYS_PER_QUERY) {
      const chunk = keys.slice(start, start + KEYS_PER_QUERY);
      const latest = await this.#storage.signals.latestSignalVersions(chunk);
      for (const key of chunk) {
        const from = this.#lowestAfter(key);
        if (from !== null && (latest.get(key) ?? 0) > from) behind.set(key, from);
      }
    }
    while (behind.size > 0) {
      const signals = await this.#storage.signals.signalsAfter(behind, CATCH_UP_BATCH);
      for (const signal of signals) {
        this.#deliver(signal);
        behind.set(signal.key, signal.version);
      }
      if (signals.length < CATCH_UP_BATCH) break;
    }
  }

  /** The lowest version a listener of `key` has been handed (null: none ready yet). */
  #lowestAfter(key: string): number | null {
    let lowest: number | null = null;
    for (const entry of this.#listening.get(key) ?? []) {
      if (entry.after !== null && (lowest === null || entry.after < lowest)) lowest = entry.after;
    }
    return lowest;
  }

  #deliver(signal: Signal): void {
    for (const entry of this.#listening.get(signal.key) ?? []) {
      if (entry.closed || entry.after === null || signal.version <= entry.after) continue;
      entry.after = signal.version;
      entry.delivering = entry.delivering.then(async () => {
        if (entry.closed) return;
        try {
          await entry.listener(signal);
        } catch (error) {
          this.#log.warn(
            { signal_key: signal.key, signal_version: signal.version, error: describeThrown(error).error },
            `a listener of signal ${signal.key} threw on version ${signal.version}: ${describeThrown(error).error}`,
          );
        }
      });
    }
  }
}

/** Sends `value` (JSON; null by default) on `key`; resolves with its version (the key's first send is 1). */
export function sendSignal(database: Database, key: string, value: JsonValue = null): Promise<number> {
  return SignalService.of(database).send(key, value, 'api');
}

/** The key's signals after `sinceVersion` (default 0), oldest first, at most `limit` (default 1000). */
export function listSignals(database: Database, key: string, options: { sinceVersion?: number; limit?: number } = {}): Promise<Signal[]> {
  return SignalService.of(database).list(key, options);
}

/**
 * Calls `listener` with each signal of `key` after `sinceVersion` (default: the latest now), in
 * order, each once, until the subscription is closed; see SignalService.listen.
 */
export function listenSignal(database: Database, key: string, listener: SignalListener, options: { sinceVersion?: number } = {}): Promise<SignalSubscription> {
  return SignalService.of(database).listen(key, listener, options);
}

/** The key's latest version; 0 when nothing was sent on it. */
export function latestSignalVersion(database: Database, key: string): Promise<number> {
  return SignalService.of(database).latestVersion(key);
}
