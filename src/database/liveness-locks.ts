import type BetterSqlite3 from 'better-sqlite3';
import { existsSync, mkdirSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import pino, { type Logger } from 'pino';
import { sql } from './kysely.ts';
import { betterSqlite3Package, pgPackage } from '../vocabulary/lazy-package.ts';
import { DatabaseError, errorFields } from '../vocabulary/errors.ts';
import type { Database } from './connect.ts';
import { NotificationHub, WAKE_CHANNEL } from './notification-hub.ts';
import { InterruptibleSleep } from '../vocabulary/time/interruptible-sleep.ts';

/**
 * What a daemon holds for its process's life, so that its peers can tell at once that the process
 * is gone instead of waiting for its heartbeat to go stale (job.liveness_lock names it):
 *
 * - PostgreSQL, `pg-advisory`: a session advisory lock keyed by the job id, held on a connection of
 *   its own. PostgreSQL frees a session's advisory locks the moment the session ends: the process
 *   was killed, or its host lost the database. Peers read pg_locks.
 * - SQLite, `file:<path>`: an exclusive lock on a small file beside the database, which the kernel
 *   frees when the process ends (every process of a SQLite deployment is on one host, and SQLite's
 *   own locking keeps two connections of one process apart too). Peers try the lock: reading a
 *   file costs the database nothing, so they may do it every second.
 *
 * A lock says only that the process lives; its heartbeat says that it works (a frozen process
 * keeps its lock), so both are checked. A job with no lock (written before locks, or behind a
 * pooler that breaks session locks) is judged by its heartbeat alone.
 */
export interface LivenessLocks {
  /** Takes job `jobId`'s lock for this process's life: what job.liveness_lock should say, or null where none can be held. */
  hold(jobId: number): Promise<string | null>;
  /** Lets go of it (the job ended). */
  release(jobId: number): Promise<void>;
  /**
   * Which of `jobs` have lost their lock: their processes are gone. Jobs with no lock, and jobs
   * of this process, are never among them; a lock that cannot be checked counts as held.
   */
  gone(jobs: readonly LockedJob[]): Promise<Set<number>>;
  /**
   * Calls `onGone` soon after another process's job lets go of its lock (within about a second),
   * so the daemon looks at once instead of at its next poll; `listJobs` names the running jobs
   * (read again every WATCH_REFRESH_MS). Returns what stops it.
   */
  watch(listJobs: () => Promise<LockedJob[]>, onGone: () => void): () => void;
  close(): Promise<void>;
}

/**
 * How long a PostgreSQL session must have stood before a free lock is taken as a gone process:
 * longer than a process needs to take its locks again once the server answers (RETAKE_MAX_DELAY_MS
 * and a connection).
 */
const LOCK_TRUST_MS = 5_000;
/** The longest pause between tries to take the locks again on a new session. */
const RETAKE_MAX_DELAY_MS = 2_000;

/** How often a watch reads the running jobs again (a job started since is watched from then; on PostgreSQL, sooner: see RING_CHANGED). */
const WATCH_REFRESH_MS = 30_000;
/** The wake-up topic a process NOTIFYs when it takes the lock of a new job: every ring looks again. Daemons ignore it. */
const RING_CHANGED = 'liveness';
/** How often a SQLite watch tries the lock files (a read of small files; no database statement). */
const FILE_PROBE_MS = 500;

export interface LockedJob {
  readonly id: number;
  /** job.liveness_lock. */
  readonly livenessLock: string | null;
}

export const PG_ADVISORY_LOCK = 'pg-advisory';
const FILE_LOCK_PREFIX = 'file:';

/**
 * The first key of the advisory locks: one per schema, so that deferflow databases sharing a
 * PostgreSQL database (one schema each) never read each other's locks. hashtext is PostgreSQL's
 * own string hash (an int4); the oid cast is how pg_locks shows that key.
 */
const PG_LOCK_SPACE_SQL = `hashtext('deferflow liveness ' || current_schema())`;

const registry = new WeakMap<object, LivenessLocks>();

/** The process's liveness locks on `database` (one set per open database); `log` hears of lost sessions. */
export function livenessLocksOf(database: Database, log: Logger = pino({ enabled: false })): LivenessLocks {
  let locks = registry.get(database.db);
  if (!locks) {
    locks =
      database.target.dialect === 'postgres'
        ? new PostgresLivenessLocks(database, database.target.url, log)
        : database.target.file === ':memory:'
          ? NO_LOCKS
          : new FileLivenessLocks(database.target.file, log);
    registry.set(database.db, locks);
  }
  return locks;
}

/** Closes the locks of `database` (its handle is closing): the process's jobs look gone from then on. */
export async function closeLivenessLocksFor(db: object): Promise<void> {
  const locks = registry.get(db);
  registry.delete(db);
  await locks?.close();
}

const NO_LOCKS: LivenessLocks = {
  hold: async () => null,
  release: async () => {},
  gone: async () => new Set(),
  watch: () => () => {},
  close: async () => {},
};

/**
 * The watches of one process: its daemons' callbacks, run while any is registered. How the other
 * processes' locks are watched is the dialect's (`run`); what it finds gone calls every callback.
 */
class Watches {
  readonly #callbacks = new Set<() => void>();
  #listJobs: (() => Promise<LockedJob[]>) | null = null;
  #stop: (() => void) | null = null;

  constructor(private readonly run: (listJobs: () => Promise<LockedJob[]>, gone: () => void) => () => void) {}

  add(listJobs: () => Promise<LockedJob[]>, onGone: () => void): () => void {
    this.#callbacks.add(onGone);
    this.#listJobs ??= listJobs;
    this.#stop ??= this.run(listJobs, () => {
      for (const callback of this.#callbacks) callback();
    });
    return () => {
      this.#callbacks.delete(onGone);
      if (this.#callbacks.size === 0) this.stop();
    };
  }

  stop(): void {
    this.#stop?.();
    this.#stop = null;
    this.#listJobs = null;
  }
}

class PostgresLivenessLocks implements LivenessLocks {
  readonly #held = new Set<number>();
  /** When the session holding this process's locks last (re)took them (Date.now() ms); null while it is down. */
  #sessionSince: number | null = null;
  readonly #watches = new Watches((listJobs, gone) => this.#ring(listJobs, gone));
  #client: Promise<pg.Client> | null = null;
  #closed = false;
  #retryTimer: NodeJS.Timeout | null = null;
  #warnedPooler = false;

  constructor(
    private readonly database: Database,
    private readonly url: string,
    private readonly log: Logger,
  ) {}

  async hold(jobId: number): Promise<string | null> {
    const client = await this.#connection();
    const { rows } = await client.query<{ pid: number }>(`select pg_advisory_lock(${PG_LOCK_SPACE_SQL}, $1), pg_backend_pid() as pid`, [jobId]);
    // Behind a pooler in transaction mode the next statement may run on another server session:
    // the lock stays with a server session the pooler may close (a live process then looks gone)
    // or keep (a dead one then looks alive). Two more statements must run on the same session.
    for (let check = 0; check < 2; check++) {
      const again = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      if (again.rows[0]?.pid === rows[0]!.pid) continue;
      if (!this.#warnedPooler) {
        this.#warnedPooler = true;
        this.log.warn(
          'this process’s statements do not stay on one PostgreSQL session (a pooler in transaction mode?): it holds no liveness lock, and peers will tell it is gone only by its heartbeat threshold',
        );
      }
      return null;
    }
    const first = !this.#held.has(jobId);
    this.#held.add(jobId);
    // The first session of the process is trusted at once (the server's uptime covers a restart);
    // one that replaces a lost session only after LOCK_TRUST_MS (see #retakeSoon).
    this.#sessionSince ??= Date.now() - LOCK_TRUST_MS;
    // A new job: every ring closes over it now rather than at its next refresh (see #ring).
    if (first) {
      const { adapter, db } = this.database;
      await sql`select ${adapter.notifyExpression(WAKE_CHANNEL, RING_CHANGED)}`.execute(db).catch(() => {});
    }
    return PG_ADVISORY_LOCK;
  }

  async release(jobId: number): Promise<void> {
    if (!this.#held.delete(jobId)) return;
    const client = await this.#client?.catch(() => null);
    await client?.query(`select pg_advisory_unlock(${PG_LOCK_SPACE_SQL}, $1)`, [jobId]).catch(() => {});
  }

  async gone(jobs: readonly LockedJob[]): Promise<Set<number>> {
    const candidates = jobs.filter((job) => job.livenessLock === PG_ADVISORY_LOCK && !this.#held.has(job.id)).map((job) => job.id);
    if (candidates.length === 0) return new Set();
    // A free lock says a process is gone only if its session could have held it: not while the
    // server has just started (a restart ends every session, and each process takes its locks
    // again as it reconnects), nor while this process's own session is new (the same, seen from
    // here: a cut that ended every session), for LOCK_TRUST_MS.
    if (this.#sessionSince !== null && Date.now() - this.#sessionSince < LOCK_TRUST_MS) return new Set();
    if (this.#held.size > 0 && this.#sessionSince === null) return new Set();
    const { held, upMs } = await this.#locksHeld(candidates);
    if (upMs < LOCK_TRUST_MS) return new Set();
    return new Set(candidates.filter((id) => !held.has(id)));
  }

  /** Which of the jobs `ids` have their lock held now, and how long the server has been up (ms). */
  async #locksHeld(ids: readonly number[]): Promise<{ held: Set<number>; upMs: number }> {
    const { rows } = await sql<{ held: number[] | null; up_ms: number }>`
      select array_agg(objid::text::int) as held, (extract(epoch from now() - pg_postmaster_start_time()) * 1000)::float8 as up_ms
      from pg_locks
      where locktype = 'advisory' and granted and objsubid = 2
        and classid = (${sql.raw(PG_LOCK_SPACE_SQL)})::oid
        and database = (select oid from pg_database where datname = current_database())
        and objid::text::int in (${sql.join(ids)})`.execute(this.database.db);
    const row = rows[0];
    return { held: new Set((row?.held ?? []).map(Number)), upMs: Number(row?.up_ms ?? 0) };
  }

  watch(listJobs: () => Promise<LockedJob[]>, onGone: () => void): () => void {
    return this.#watches.add(listJobs, onGone);
  }

  /**
   * A ring: this process waits, on a session of its own, for the lock of the next process's job
   * (by job id, wrapping round), so that every process is watched by one other at no cost while
   * all live: a blocked statement is not a statement a second. The wait ends when that process
   * is gone (its session ended: PostgreSQL grants the lock), then `gone` wakes this process's
   * daemons and a NOTIFY every other's (the ones that take over may be elsewhere), and the ring
   * closes over the gap. A process that takes a lock for a new job NOTIFYs RING_CHANGED: every
   * ring ends its wait (the waiting statement cancelled) and looks again, so the process whose
   * next the new job now is watches it at once; otherwise one started after a peer's last look
   * would go unwatched until that peer's refresh, every WATCH_REFRESH_MS (lock_timeout), as a
   * backstop for a missed notification.
   */
  #ring(listJobs: () => Promise<LockedJob[]>, onGone: () => void): () => void {
    let stopped = false;
    let waiter: pg.Client | null = null;
    let waiterPid: number | null = null;
    /** Set when the ring changed since the last look: `refresh` ends the pause, `cancelWait` the lock wait in progress. */
    let changed = false;
    const refresh = new InterruptibleSleep({ unref: true });
    let cancelWait: (() => void) | null = null;
    const unsubscribe = NotificationHub.of(this.database, this.log).subscribe(WAKE_CHANNEL, (payload) => {
      if (payload !== RING_CHANGED) return;
      changed = true;
      refresh.wake();
      cancelWait?.();
    });
    // Jobs found gone: a dead process's row says running for ever (nobody ends it) and its free
    // lock would end every wait at once. A process that was only cut off takes its lock again
    // and NOTIFYs RING_CHANGED as it does (see hold): each look asks whether a gone job's lock is
    // held again, and watches it from then (its heartbeat may not move for seconds yet).
    const gone = new Set<number>();
    const watched = (job: LockedJob) => job.livenessLock === PG_ADVISORY_LOCK && !this.#held.has(job.id) && !gone.has(job.id);
    const loop = async () => {
      while (!stopped && !this.#closed) {
        try {
          changed = false;
          const listed = await listJobs();
          const stillGone = listed.filter((job) => gone.has(job.id)).map((job) => job.id);
          if (stillGone.length > 0) for (const id of (await this.#locksHeld(stillGone)).held) gone.delete(id);
          for (const id of gone) if (!listed.some((job) => job.id === id)) gone.delete(id);
          const jobs = listed.filter(watched).map((job) => job.id);
          const own = Math.max(0, ...this.#held);
          const target = jobs.sort((a, b) => a - b).find((id) => id > own) ?? jobs[0];
          if (changed) continue;
          if (target === undefined || this.#held.size === 0) {
            await refresh.sleep(WATCH_REFRESH_MS);
            continue;
          }
          gone.delete(target);
          if (!waiter) {
            waiter = await this.#openWaiter();
            waiterPid = (await waiter.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
          }
          const waiting = waiterPid;
          // The notification handler runs on a later turn than this check: the wait has been
          // sent by then, and the cancel (a round trip on the pool) reaches it waiting.
          if (changed) continue;
          cancelWait = () => void sql`select pg_cancel_backend(${waiting})`.execute(this.database.db).catch(() => {});
          try {
            await waiter.query(`select pg_advisory_lock(${PG_LOCK_SPACE_SQL}, $1)`, [target]);
          } catch (error) {
            const code = (error as { code?: string }).code;
            if (code === '55P03' || code === '57014') continue; // lock_timeout, or cancelled as the ring changed: look again
            throw error;
          } finally {
            cancelWait = null;
          }
          await waiter.query(`select pg_advisory_unlock(${PG_LOCK_SPACE_SQL}, $1)`, [target]);
          if (stopped) break;
          // The lock was free. Its job may have ended by itself (it told its peers as it stopped),
          // or every session may just have ended (a server restart, or this host's cut) with its
          // process not yet holding it again: gone() trusts a free lock only where it can tell.
          const job = (await listJobs()).find((candidate) => candidate.id === target);
          if (job === undefined) continue;
          if ((await this.gone([job])).size === 0) {
            await refresh.sleep(1000);
            continue;
          }
          gone.add(target);
          this.log.info({ job_id: target }, `job ${target}'s process is gone (its liveness lock is free)`);
          const { adapter, db } = this.database;
          await sql`select ${adapter.notifyExpression(WAKE_CHANNEL, 'triggerer')}, ${adapter.notifyExpression(WAKE_CHANNEL, 'scheduler')}`
            .execute(db)
            .catch(() => {});
          onGone();
        } catch (error) {
          if (stopped || this.#closed) break;
          this.log.warn({ ...errorFields(error, 'DF_DATABASE') }, 'watching the other processes’ liveness locks failed; trying again');
          await waiter?.end().catch(() => {});
          waiter = null;
          waiterPid = null;
          await refresh.sleep(1000);
        }
      }
    };
    void loop();
    return () => {
      stopped = true;
      unsubscribe();
      refresh.wake();
      cancelWait?.();
      void waiter?.end().catch(() => {});
    };
  }

  async #openWaiter(): Promise<pg.Client> {
    const client = new (pgPackage().Client)({ connectionString: this.url, application_name: `deferflow liveness watch ${process.pid}` });
    client.on('error', () => {});
    await client.connect();
    // Once for the session: each wait then ends by itself within WATCH_REFRESH_MS.
    await client.query(`set lock_timeout = ${WATCH_REFRESH_MS}`);
    return client;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#watches.stop();
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    const client = await this.#client?.catch(() => null);
    this.#client = null;
    this.#held.clear();
    await client?.end().catch(() => {});
  }

  /** The session holding the locks, opened at the first hold; reopened (locks taken again) when lost. */
  #connection(): Promise<pg.Client> {
    this.#client ??= (async () => {
      const client = new (pgPackage().Client)({ connectionString: this.url, application_name: `deferflow liveness ${process.pid}` });
      client.on('error', (error) => this.#lost(client, error));
      client.on('end', () => this.#lost(client, new DatabaseError('the session holding the liveness locks ended')));
      await client.connect();
      return client;
    })();
    this.#client.catch(() => {
      this.#client = null;
    });
    return this.#client;
  }

  /**
   * The session ended under the locks: to peers this process is gone now (as it should be when
   * the database cannot be reached). They are taken again on a new session once it opens.
   */
  #lost(client: pg.Client, error: unknown): void {
    if (this.#closed) return;
    void this.#client?.then((current) => {
      if (current !== client) return;
      this.#client = null;
      this.#sessionSince = null;
      this.log.warn({ ...errorFields(error, 'DF_DATABASE') }, 'the session holding this process’s liveness locks was lost; taking them again on a new one');
      this.#retakeSoon(500);
    });
  }

  #retakeSoon(delayMs: number): void {
    if (this.#closed || this.#retryTimer) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      const jobs = [...this.#held];
      this.#held.clear();
      void (async () => {
        for (const jobId of jobs) await this.hold(jobId);
        this.#sessionSince = Date.now();
      })().catch(() => {
        for (const jobId of jobs) this.#held.add(jobId);
        this.#retakeSoon(Math.min(delayMs * 2, RETAKE_MAX_DELAY_MS));
      });
    }, delayMs);
    this.#retryTimer.unref();
  }
}

class FileLivenessLocks implements LivenessLocks {
  readonly #held = new Map<number, { readonly file: string; readonly connection: BetterSqlite3.Database }>();
  readonly #watches = new Watches((listJobs, gone) => this.#probeEvery(listJobs, gone));
  readonly #folder: string;

  constructor(
    databaseFile: string,
    private readonly log: Logger,
  ) {
    this.#folder = `${path.resolve(databaseFile)}.liveness`;
  }

  async hold(jobId: number): Promise<string | null> {
    try {
      mkdirSync(this.#folder, { recursive: true });
      const file = path.join(this.#folder, `job-${jobId}`);
      const connection = new (betterSqlite3Package())(file, { timeout: 0 });
      // A rollback-journal database: BEGIN EXCLUSIVE takes the file's exclusive lock at once, and
      // holds it until the transaction ends, which it never does while the process lives.
      connection.pragma('journal_mode = DELETE');
      connection.exec('BEGIN EXCLUSIVE');
      this.#held.set(jobId, { file, connection });
      return `${FILE_LOCK_PREFIX}${file}`;
    } catch (error) {
      this.log.warn(
        { ...errorFields(error, 'DF_DATABASE') },
        `could not take a liveness lock in ${this.#folder}: peers will tell this process is gone only by its heartbeat threshold`,
      );
      return null;
    }
  }

  async release(jobId: number): Promise<void> {
    const held = this.#held.get(jobId);
    if (!held) return;
    this.#held.delete(jobId);
    held.connection.close();
    try {
      unlinkSync(held.file);
    } catch {}
  }

  async gone(jobs: readonly LockedJob[]): Promise<Set<number>> {
    const gone = new Set<number>();
    for (const job of jobs) {
      if (job.livenessLock === null || !job.livenessLock.startsWith(FILE_LOCK_PREFIX) || this.#held.has(job.id)) continue;
      if (lockFileIsFree(job.livenessLock.slice(FILE_LOCK_PREFIX.length))) gone.add(job.id);
    }
    return gone;
  }

  watch(listJobs: () => Promise<LockedJob[]>, onGone: () => void): () => void {
    return this.#watches.add(listJobs, onGone);
  }

  /** Tries the other processes' lock files every FILE_PROBE_MS: files, not the database. */
  #probeEvery(listJobs: () => Promise<LockedJob[]>, gone: () => void): () => void {
    let jobs: LockedJob[] = [];
    let listedAt = Number.NEGATIVE_INFINITY;
    let busy = false;
    // Jobs found gone stay listed as running (nobody ends a dead process's row): told once.
    const told = new Set<number>();
    const timer = setInterval(() => {
      if (busy) return;
      busy = true;
      void (async () => {
        if (Date.now() - listedAt >= WATCH_REFRESH_MS) {
          jobs = (await listJobs()).filter((job) => !told.has(job.id));
          listedAt = Date.now();
        }
        const found = await this.gone(jobs);
        if (found.size > 0) {
          for (const id of found) told.add(id);
          jobs = jobs.filter((job) => !found.has(job.id));
          gone();
        }
      })()
        .catch(() => {})
        .finally(() => {
          busy = false;
        });
    }, FILE_PROBE_MS);
    timer.unref();
    return () => clearInterval(timer);
  }

  async close(): Promise<void> {
    this.#watches.stop();
    for (const jobId of [...this.#held.keys()]) await this.release(jobId);
  }
}

/** Whether nobody holds the lock file (the file is gone, or its lock can be taken); a file that cannot be tried counts as held. */
function lockFileIsFree(file: string): boolean {
  if (!existsSync(file)) return true;
  let probe: BetterSqlite3.Database;
  try {
    probe = new (betterSqlite3Package())(file, { timeout: 0, fileMustExist: true });
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'SQLITE_CANTOPEN' && !existsSync(file);
  }
  try {
    probe.exec('BEGIN IMMEDIATE');
    probe.exec('ROLLBACK');
  } catch {
    return false;
  } finally {
    probe.close();
  }
  // Free: its process is gone. The file goes too (a peer that finds it missing knows as much).
  try {
    unlinkSync(file);
  } catch {}
  return true;
}
