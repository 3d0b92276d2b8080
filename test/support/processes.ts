/**
 * Real triggerer processes for the HA tests.
 *
 *   const tr = spawnTriggerer(['--db', url, '--capacity', '300']);
 *   const start = await tr.waitForLine((l) => typeof l.job_id === 'number');
 *   tr.kill('SIGTERM');
 *   expect(await tr.exit).toEqual({ code: 0, signal: null });
 *   afterEach(killLeftovers);
 *
 * Every stdout line is kept as text; those that parse as a JSON object (pino's lines) are
 * also kept parsed. stderr is kept as text for error messages.
 */
import Sqlite from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sql, type Kysely } from 'kysely';
import type { DatabaseSchema } from '../../src/database/schema.ts';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The built package's entry points: what DAG files run by spawned deferflow processes import, as a user's would. */
export const PACKAGE_ENTRY = path.join(REPO_ROOT, 'dist/src/index.js');
export const PACKAGE_TRIGGERS = path.join(REPO_ROOT, 'dist/triggers/index.js');
/** The environment of a worker or standalone that runs task code in runner processes, the default outside the suite (see vitest.config.ts). */
export const RUNNER_PROCESSES = { DEFERFLOW_TASK_ISOLATION: 'process' } as const;
const TRIGGERER_BIN = path.join(REPO_ROOT, 'bin/triggerer.js');
export const DEFERFLOW_BIN = path.join(REPO_ROOT, 'bin/deferflow.js');
const SPAWNED_TSCONFIG = path.join(REPO_ROOT, 'test/support/tsconfig.spawned.json');

export type LogLine = Record<string, unknown>;

export interface ProcessExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

const live = new Set<TriggererProcess>();

export class TriggererProcess {
  readonly child: ChildProcess;
  /** stdout lines that are JSON objects, parsed, in order. */
  readonly lines: LogLine[] = [];
  /** Every stdout line as printed, JSON or not, in order. */
  readonly text: string[] = [];
  readonly stderr: string[] = [];
  /** Resolves when the process has exited and its output is fully read. */
  readonly exit: Promise<ProcessExit>;
  /** Set once the process has exited. */
  exited: ProcessExit | null = null;
  readonly #waiters = new Set<() => void>();

  /** `cwd`: where the command runs; a user's project, say. A test file's import of 'deferflow' finds the build, as a user's does (see tsconfig.spawned.json). */
  constructor(
    readonly args: readonly string[],
    env: NodeJS.ProcessEnv = {},
    bin = TRIGGERER_BIN,
    cwd = REPO_ROOT,
  ) {
    this.child = spawn(process.execPath, [bin, ...args], {
      cwd,
      env: { ...process.env, DEFERFLOW_LOG_FORMAT: 'json', TSX_TSCONFIG_PATH: SPAWNED_TSCONFIG, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(this);
    const stdoutDone = new Promise<void>((resolve) => {
      const reader = createInterface({ input: this.child.stdout!, crlfDelay: Infinity });
      reader.on('line', (line) => this.#onLine(line));
      reader.on('close', resolve);
    });
    const stderrDone = new Promise<void>((resolve) => {
      const reader = createInterface({ input: this.child.stderr!, crlfDelay: Infinity });
      reader.on('line', (line) => this.stderr.push(line));
      reader.on('close', resolve);
    });
    const exited = new Promise<ProcessExit>((resolve) => {
      this.child.on('exit', (code, signal) => resolve({ code, signal }));
      this.child.on('error', (error) => {
        this.stderr.push(`spawn error: ${error.message}`);
        resolve({ code: null, signal: null });
      });
    });
    this.exit = Promise.all([exited, stdoutDone, stderrDone]).then(([result]) => {
      this.exited = result;
      live.delete(this);
      this.#notify();
      return result;
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Sends `signal` unless the process has already exited. */
  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    if (this.exited === null && this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }

  /** The exit, or a rejection naming the command and its last output if it runs longer than `timeoutMs`. */
  async exitWithin(timeoutMs = 20_000): Promise<ProcessExit> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`${this.args.join(' ')} (pid ${this.pid}) still running after ${timeoutMs} ms\n${this.describe()}`)),
        timeoutMs,
      );
    });
    try {
      return await Promise.race([this.exit, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** JSON lines matching `predicate`. */
  matching(predicate: (line: LogLine) => boolean): LogLine[] {
    return this.lines.filter(predicate);
  }

  /** The job id from the line a daemon prints once its job row is registered (it has started). */
  async waitForJob(timeoutMs = 10_000): Promise<number> {
    return Number((await this.waitForLine((line) => typeof line.job_id === 'number', timeoutMs)).job_id);
  }

  /** Where /metrics and /health are served (`http://host:port`), from the line printed once they are (--http-port). */
  async waitForHttp(timeoutMs = 20_000): Promise<string> {
    const line = await this.waitForLine((l) => typeof l.port === 'number' && String(l.msg).includes('/health'), timeoutMs);
    return `http://${String(line.host)}:${Number(line.port)}`;
  }

  /** The status page's address (`http://host:port`, no trailing slash), from the `status page: URL` line standalone and `deferflow web` print. */
  async waitForStatusPage(timeoutMs = 30_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.text.find((text) => text.startsWith('status page: '));
      if (line) return line.slice('status page: '.length).replace(/\/$/, '');
      if (this.exited !== null || Date.now() > deadline) throw new Error(`no status page line from ${this.args.join(' ')}\n${this.describe()}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /**
   * The first JSON line (already printed or still to come) matching `predicate`. Rejects after
   * `timeoutMs`, or as soon as the process exits without having printed one.
   */
  waitForLine(predicate: (line: LogLine) => boolean, timeoutMs = 10_000): Promise<LogLine> {
    return new Promise<LogLine>((resolve, reject) => {
      let scanned = 0;
      const check = (): boolean => {
        for (; scanned < this.lines.length; scanned++) {
          if (predicate(this.lines[scanned]!)) {
            finish();
            resolve(this.lines[scanned]!);
            return true;
          }
        }
        if (this.exited !== null) {
          finish();
          reject(new Error(`triggerer ${this.pid} exited (${JSON.stringify(this.exited)}) without the awaited line\n${this.describe()}`));
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a line from triggerer ${this.pid}\n${this.describe()}`));
      }, timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      if (!check()) this.#waiters.add(check);
    });
  }

  /** The last lines of output, for failure messages. */
  describe(last = 15): string {
    const out = this.text.slice(-last).map((line) => `  stdout: ${line.slice(0, 400)}`);
    const err = this.stderr.slice(-last).map((line) => `  stderr: ${line.slice(0, 400)}`);
    return [...out, ...err].join('\n');
  }

  #onLine(line: string): void {
    this.text.push(line);
    try {
      const parsed: unknown = JSON.parse(line);
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) this.lines.push(parsed as LogLine);
    } catch {
      // not JSON: kept in `text` only
    }
    this.#notify();
  }

  #notify(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }
}

/** Starts `node bin/triggerer.js ARGS` in the repository root. */
export function spawnTriggerer(args: readonly string[], env: NodeJS.ProcessEnv = {}): TriggererProcess {
  return new TriggererProcess(args, env);
}

/** Starts `node bin/deferflow.js ARGS` (any command: worker, scheduler, dags ...) in the repository root. */
export function spawnDeferflow(args: readonly string[], env: NodeJS.ProcessEnv = {}, cwd = REPO_ROOT): TriggererProcess {
  return new TriggererProcess(args, env, DEFERFLOW_BIN, cwd);
}

/**
 * Stops each process with SIGTERM, as a user or a service manager would, all at once, and throws
 * naming the command and its last output unless each exits 0 within `timeoutMs`.
 */
export async function stopCleanly(procs: Iterable<TriggererProcess>, timeoutMs = 30_000): Promise<void> {
  const stopping = [...procs];
  for (const proc of stopping) proc.kill('SIGTERM');
  for (const proc of stopping) {
    const exit = await proc.exitWithin(timeoutMs);
    if (exit.code !== 0 || exit.signal !== null)
      throw new Error(`${proc.args.join(' ')} ended ${JSON.stringify(exit)} on SIGTERM, not with code 0\n${proc.describe()}`);
  }
}

/** SIGKILLs every triggerer still running and waits for them to be gone (use in afterEach). */
export async function killLeftovers(): Promise<void> {
  const left = [...live];
  for (const tr of left) tr.kill('SIGKILL');
  await Promise.all(left.map((tr) => tr.exit));
}

// Should the test process go away without afterEach (a crash, a timeout), do not leave orphans.
process.on('exit', () => {
  for (const tr of live) tr.child.kill('SIGKILL');
});

/**
 * Freezes `proc` (SIGSTOP), as a frozen VM or a long pause would. On SQLite a process frozen in
 * the middle of a write would hold the database's one write lock for as long as it stays frozen,
 * and every other process (the test's own reads and writes too) would wait on it: there, it is
 * thawed and frozen again until it stops outside a write.
 */
export async function freeze(proc: TriggererProcess, databaseUrl: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    proc.kill('SIGSTOP');
    if (!databaseUrl.startsWith('sqlite:')) return;
    const probe = new Sqlite(databaseUrl.slice('sqlite:'.length), { timeout: 0, fileMustExist: true });
    try {
      probe.exec('BEGIN IMMEDIATE');
      probe.exec('ROLLBACK');
      return;
    } catch (error) {
      if (attempt >= 200) throw error;
    } finally {
      probe.close();
    }
    proc.kill('SIGCONT');
    await new Promise((resolve) => setTimeout(resolve, 10 + Math.random() * 20));
  }
}

/**
 * Freezes `proc` (SIGSTOP) in the middle of a PostgreSQL transaction that has locked trigger
 * rows (so it holds their row locks, which a peer taking its triggers over needs): thawed and
 * frozen again until pg_stat_activity shows one of its sessions idle in such a transaction. The
 * process must be writing often (triggers firing) for this to come soon. `db` is a connection of
 * the test's own.
 */
export async function freezeInTransaction(proc: TriggererProcess, db: Kysely<DatabaseSchema>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    proc.kill('SIGSTOP');
    // A statement the process sent just before the stop finishes on the server meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 30));
    const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from pg_stat_activity activity join pg_locks locks on locks.pid = activity.pid
      where activity.application_name = ${`deferflow ${proc.pid}`} and activity.state = 'idle in transaction'
        and locks.relation = 'trigger'::regclass`.execute(db);
    if (rows[0]!.n > 0) return;
    if (attempt >= 1000) throw new Error(`process ${proc.pid} was never caught inside a transaction that locked trigger rows`);
    proc.kill('SIGCONT');
    await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20));
  }
}
