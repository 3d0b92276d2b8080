// Failover, measured from outside: two triggerer processes (the package's bin) and `--triggers`
// waits due across `--span` seconds from the fault on. The one holding them all is stopped
// (SIGTERM), killed (SIGKILL) or frozen (SIGSTOP, thawed `--stop-seconds` later); `--hogs` CPU
// busy loops may run the whole trial. Each trigger appends a line when a run of it starts and
// when it fires (test/fixtures/test-triggers.ts DueTrigger), and an audit table, written by a
// database trigger, records every state change of every task instance. `--trials` of each fault,
// each on a fresh database. One JSON line per fault kind:
//
//   handover_p50_ms / _p99_ms / _max_ms  the fault → the peer has started every trigger not yet fired
//   after_release_p50_ms / _p99_ms       SIGTERM: the victim's release (its log line) → the same moment
//   late_p99_ms / late_max_ms            how late the task instances due after the fault moved (their due moment → the move)
//   lost                                 task instances never moved
//   moved_twice                          task instances moved from deferred to scheduled more than once
//   false_takeovers                      releases of the triggers of a triggerer that was not faulted, or before the fault
//
// Thresholds: SIGTERM and SIGKILL trials set the heartbeat threshold to 60 s, so that only the
// release (a stop) or the liveness lock (a kill) can explain a fast takeover; SIGSTOP trials run
// the defaults (a frozen process keeps its lock: its heartbeat tells).
//
// `--daemon worker` faults a worker instead: a scheduler and two worker processes (the package's
// bin, default task isolation), `--tasks` tasks that run until stopped, all on the victim when
// the fault comes; the audit table times each try's moves. Its JSON line has
//
//   handover_p50_ms / _p99_ms / _max_ms  the fault → every try of the victim handed back (SIGTERM, shutdown grace 0)
//                                        or retried by the scheduler (SIGKILL: its liveness lock; SIGSTOP: the zombie threshold)
//   after_release_p50_ms / _p99_ms       the first try handed back or retried → every task running again on the survivor
//   lost                                 tasks not running again within a minute (SIGSTOP: before the thaw)
//   moved_twice                          tasks that started running more than once after the fault
//   false_takeovers                      tries taken from a worker before its fault
//
//   npm run bench:failover -- [--db postgres://…] [--daemon triggerer|worker] [--trials 10] [--triggers 200] [--tasks 20] [--span 20]
//     [--faults SIGTERM,SIGKILL,SIGSTOP] [--hogs 0] [--triggerer-args="--claims-per-loop 5000"] [--worker-args="--task-isolation none"]
import { spawn as spawnChild } from 'node:child_process';
import { closeSync, fstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { type Database, openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { DueTrigger } from '../test/fixtures/test-triggers.ts';
import { freeze, PACKAGE_ENTRY, spawnDeferflow, TriggererProcess } from '../test/support/processes.ts';
import { benchDatabase, insertDeferrals, percentile, until } from './bench-support.ts';

const FAULTS = ['SIGTERM', 'SIGKILL', 'SIGSTOP'] as const;
type Fault = (typeof FAULTS)[number];

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'postgres://… (a private schema is made); default: a SQLite file' })
  .option('trials', { type: 'number', default: 10 })
  .option('daemon', { choices: ['triggerer', 'worker'] as const, default: 'triggerer' as const, describe: 'which daemon is faulted' })
  .option('triggers', { type: 'number', default: 200 })
  .option('tasks', { type: 'number', default: 20, describe: '--daemon worker: tasks running on the victim at the fault' })
  .option('span', { type: 'number', default: 20, describe: 'seconds across which the triggers come due, from the fault on' })
  .option('stop-seconds', { type: 'number', default: 30, describe: 'how long a SIGSTOP trial keeps the victim frozen' })
  .option('hogs', { type: 'number', default: 0, describe: 'CPU busy loops running through each trial' })
  .option('faults', { type: 'string', default: FAULTS.join(','), describe: 'which faults, comma-separated' })
  .option('triggerer-args', { type: 'string', default: '', describe: 'more flags for both triggerers, space-separated (e.g. "--claims-per-loop 5000")' })
  .option('worker-args', {
    type: 'string',
    default: '',
    describe: '--daemon worker: more flags for both workers, space-separated (e.g. "--task-isolation none")',
  })
  .strict()
  .parse();

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-failover-'));
const dialect = args.db?.startsWith('postgres') ? 'postgres' : 'sqlite';

function spawnTriggerer(url: string, fault: Fault): TriggererProcess {
  const threshold = fault === 'SIGSTOP' ? [] : ['--health-check-threshold', '60'];
  return new TriggererProcess(
    // Capacity for every trigger (the default is 1,000): the victim holds them all, the survivor takes them all.
    [
      '--db',
      url,
      '--trigger-module',
      'test/fixtures/test-triggers.ts',
      '--log-level',
      'info',
      '--capacity',
      String(args.triggers),
      ...threshold,
      ...args.triggererArgs.split(' ').filter(Boolean),
    ],
    {},
    path.join(root, 'bin/triggerer.js'),
    root,
  );
}

/** An audit of every task instance state change, written by the database itself (epoch ms). */
async function audit(database: Database): Promise<void> {
  if (dialect === 'postgres') {
    await sql`create table bench_audit (ti bigint not null, old_state text, new_state text, at_ms double precision not null default extract(epoch from clock_timestamp()) * 1000)`.execute(
      database.db,
    );
    await sql`create function bench_audit_change() returns trigger language plpgsql as $$
      begin
        if new.state is distinct from old.state then insert into bench_audit (ti, old_state, new_state) values (new.id, old.state, new.state); end if;
        return new;
      end $$`.execute(database.db);
    await sql`create trigger bench_audit_change after update on task_instance for each row execute function bench_audit_change()`.execute(database.db);
  } else {
    await sql`create table bench_audit (ti integer not null, old_state text, new_state text, at_ms real not null)`.execute(database.db);
    await sql`create trigger bench_audit_change after update of state on task_instance when new.state is not old.state
      begin insert into bench_audit (ti, old_state, new_state, at_ms) values (new.id, old.state, new.state, (julianday('now') - 2440587.5) * 86400000.0); end`.execute(
      database.db,
    );
  }
}

/**
 * The "start <tag> <pid>" and "fire <tag> <pid> <ms>" lines DueTrigger appends to its file, read
 * as they come (only the bytes appended since the last read: 10,000 triggers make a file that
 * re-reading whole every few milliseconds would take the CPU the triggerers need).
 */
class TriggerLines {
  readonly started = new Set<string>();
  /** Tags the survivor has started or that have fired: handed over, or done. */
  readonly covered = new Set<string>();
  survivor = 0;
  #offset = 0;
  #partial = '';
  constructor(private readonly file: string) {}

  read(): this {
    const fd = openSync(this.file, 'r');
    try {
      const size = fstatSync(fd).size;
      if (size <= this.#offset) return this;
      const buffer = Buffer.alloc(size - this.#offset);
      readSync(fd, buffer, 0, buffer.length, this.#offset);
      this.#offset = size;
      const text = this.#partial + buffer.toString('utf8');
      const complete = text.lastIndexOf('\n') + 1;
      this.#partial = text.slice(complete);
      for (const line of text.slice(0, complete).split('\n')) {
        const [what, tag, pid] = line.split(' ');
        if (what === 'start') {
          this.started.add(tag!);
          if (Number(pid) === this.survivor) this.covered.add(tag!);
        } else if (what === 'fire') this.covered.add(tag!);
      }
      return this;
    } finally {
      closeSync(fd);
    }
  }
}

interface TrialResult {
  handoverMs: number;
  afterReleaseMs: number;
  late: number[];
  lost: number;
  movedTwice: number;
  falseTakeovers: number;
}

async function trial(fault: Fault, n: number): Promise<TrialResult> {
  const { url, dispose } = await benchDatabase(args.db, mkdtempSync(path.join(scratch, `${fault}-${n}-`)));
  const database = openDatabase(url);
  const file = path.join(scratch, `${fault}-${n}.log`);
  writeFileSync(file, '');
  const procs: TriggererProcess[] = [];
  try {
    await migrateToLatest(database);
    await audit(database);
    const victim = spawnTriggerer(url, fault);
    procs.push(victim);
    const victimJob = await victim.waitForJob(30_000);
    // The fault comes once every trigger runs on the victim (a budget for the insert and the
    // claims, generous: the CPU hogs slow them), then the triggers come due across the span.
    const faultAt = Date.now() + 5000 + args.triggers * 0.5 * (1 + args.hogs / 2);
    const dueOf = (i: number) => Math.round(faultAt + ((i + 1) * args.span * 1000) / args.triggers);
    await insertDeferrals(database, args.triggers, (i) => {
      const { classpath, kwargs } = new DueTrigger({ file, n: i, at: dueOf(i) }).serialize();
      return { classpath, kwargs: JSON.stringify(kwargs) };
    });
    // Task instance id → its trigger's due moment (the audit table names task instances).
    const due = new Map<number, number>();
    for (const row of await database.db.selectFrom('task_instance').select(['id', 'task_id']).where('dag_id', '=', 'bench').execute()) {
      due.set(row.id, dueOf(Number(row.task_id.slice('wait_'.length))));
    }
    const lines = new TriggerLines(file);
    await until(() => lines.read().started.size === args.triggers, { timeoutMs: 120_000, what: 'the victim running every trigger', intervalMs: 50 });
    const survivor = spawnTriggerer(url, fault);
    procs.push(survivor);
    await survivor.waitForJob(30_000);
    lines.survivor = survivor.pid!;
    if (Date.now() < faultAt) await new Promise((resolve) => setTimeout(resolve, faultAt - Date.now()));
    else
      process.stderr.write(
        `${fault} trial ${n}: the victim ran every trigger ${Date.now() - faultAt} ms after the planned fault; the first triggers were due before it\n`,
      );
    const faultedAt = Date.now();
    if (fault === 'SIGSTOP') await freeze(victim, url);
    else victim.kill(fault);
    const thawAt = faultedAt + args.stopSeconds * 1000;
    let handoverMs = Number.NaN;
    let afterReleaseMs = Number.NaN;
    try {
      await until(() => lines.read().covered.size === args.triggers, {
        timeoutMs: fault === 'SIGSTOP' ? args.stopSeconds * 1000 : 60_000,
        what: 'the survivor running every trigger',
        intervalMs: 5,
      });
      const handedOverAt = Date.now();
      handoverMs = handedOverAt - faultedAt;
      const release = victim.matching((line) => line.job_id === victimJob && typeof line.released_triggers === 'number')[0];
      if (release) afterReleaseMs = handedOverAt - Number(release.time);
    } catch {}
    if (fault === 'SIGSTOP') {
      if (Date.now() < thawAt) await new Promise((resolve) => setTimeout(resolve, thawAt - Date.now()));
      victim.kill('SIGCONT');
    }
    // Every task instance moved, or a minute past the last due moment.
    const lastDue = Math.max(...due.values());
    const deferred = async () =>
      Number(
        (
          await database.db
            .selectFrom('task_instance')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('state', '=', 'deferred')
            .executeTakeFirstOrThrow()
        ).n,
      );
    await until(async () => (await deferred()) === 0, {
      timeoutMs: Math.max(0, lastDue - Date.now()) + 60_000,
      what: 'every task instance moved',
      intervalMs: 50,
    }).catch(() => {});
    if (fault === 'SIGSTOP') await new Promise((resolve) => setTimeout(resolve, 2000)); // the thawed victim's last writes
    const { rows } = await sql<{ ti: number; moves: number | string; first_ms: number }>`
      select ti, count(*) as moves, min(at_ms) as first_ms from bench_audit where old_state = 'deferred' and new_state = 'scheduled' group by ti`.execute(
      database.db,
    );
    const moves = new Map(rows.map((row) => [Number(row.ti), { moves: Number(row.moves), at: Number(row.first_ms) }]));
    const late: number[] = [];
    let lost = 0;
    let movedTwice = 0;
    for (const [ti, at] of due) {
      const move = moves.get(ti);
      if (!move) lost++;
      else {
        if (move.moves > 1) movedTwice++;
        if (at >= faultedAt) late.push(Math.max(0, move.at - at));
      }
    }
    const releases = procs.flatMap((proc) => proc.matching((line) => Array.isArray(line.dead_triggerers)));
    const falseTakeovers = releases.filter((line) => Number(line.time) < faultedAt || (line.dead_triggerers as number[]).some((id) => id !== victimJob)).length;
    return { handoverMs, afterReleaseMs, late, lost, movedTwice, falseTakeovers };
  } finally {
    await endTrial(procs, database, dispose);
    rmSync(file, { force: true });
  }
}

/** A DAG of `--tasks` tasks, each appending "start <task> <try> <pid>" to `file` and then running until it is stopped. */
function holdingDag(file: string): string {
  return `import { appendFileSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class Hold extends BaseOperator {
  async execute(context) {
    appendFileSync(${JSON.stringify(file)}, \`start \${this.taskId} \${context.taskInstance.tryNumber} \${process.pid}\\n\`);
    await new Promise(() => {});
  }
}
export const dag = new Dag({ dagId: 'holding', defaultArgs: { retries: 1, retryDelay: 0 } });
for (let i = 0; i < ${args.tasks}; i++) dag.add(new Hold({ taskId: \`hold_\${i}\` }));
`;
}

/** One fault of a worker running `--tasks` tries (see the header). */
async function workerTrial(fault: Fault, n: number): Promise<TrialResult> {
  const dir = mkdtempSync(path.join(scratch, `worker-${fault}-${n}-`));
  const { url, dispose } = await benchDatabase(args.db, dir);
  const database = openDatabase(url);
  const dags = path.join(dir, 'dags');
  mkdirSync(dags);
  const file = path.join(dir, 'starts.log');
  writeFileSync(file, '');
  writeFileSync(path.join(dags, 'holding.mjs'), holdingDag(file));
  const procs: TriggererProcess[] = [];
  const spawn = (command: string[]) => {
    const proc = spawnDeferflow(command);
    procs.push(proc);
    return proc;
  };
  const starts = () =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(' '));
  try {
    await migrateToLatest(database);
    await audit(database);
    // SIGTERM and SIGKILL: a zombie threshold no trial reaches, so only the hand-back or the lock can explain a fast takeover.
    const threshold = fault === 'SIGSTOP' ? [] : ['--zombie-threshold', '60'];
    await spawn(['scheduler', '--db', url, ...threshold]).waitForJob(30_000);
    const workerArgs = [
      'worker',
      '--db',
      url,
      '--dags',
      dags,
      '--concurrency',
      String(args.tasks),
      '--shutdown-grace',
      '0',
      ...args.workerArgs.split(' ').filter(Boolean),
    ];
    const victim = spawn(workerArgs);
    await victim.waitForJob(30_000);
    const trigger = spawnDeferflow(['dags', 'trigger', 'holding', '--db', url]);
    const triggered = await trigger.exit;
    if (triggered.code !== 0) throw new Error(`dags trigger exited ${triggered.code}: ${trigger.stderr.join('')}`);
    await until(() => starts().length === args.tasks, { timeoutMs: 120_000, what: 'every task running on the victim', intervalMs: 20 });
    const survivor = spawn(workerArgs);
    await survivor.waitForJob(30_000);
    const faultedAt = Date.now();
    if (fault === 'SIGSTOP') await freeze(victim, url);
    else victim.kill(fault);
    // Every task running again after the fault, or the time allowed.
    const moves = async () =>
      (
        await sql<{ ti: number; old_state: string | null; new_state: string | null; at_ms: number }>`
          select ti, old_state, new_state, at_ms from bench_audit order by at_ms`.execute(database.db)
      ).rows.map((row) => ({ ...row, ti: Number(row.ti), at_ms: Number(row.at_ms) }));
    const runningAgain = async () =>
      new Set((await moves()).filter((move) => move.at_ms >= faultedAt && move.new_state === 'running').map((move) => move.ti)).size;
    await until(async () => (await runningAgain()) === args.tasks, {
      timeoutMs: fault === 'SIGSTOP' ? args.stopSeconds * 1000 : 60_000,
      what: 'every task running again',
      intervalMs: 20,
    }).catch(() => {});
    if (fault === 'SIGSTOP') victim.kill('SIGCONT');
    const all = await moves();
    const left = new Map<number, number>();
    const again = new Map<number, number[]>();
    let falseTakeovers = 0;
    for (const move of all) {
      if (move.old_state === 'running') {
        if (move.at_ms < faultedAt) falseTakeovers++;
        else if (!left.has(move.ti)) left.set(move.ti, move.at_ms);
      }
      if (move.new_state === 'running' && move.at_ms >= faultedAt) again.set(move.ti, [...(again.get(move.ti) ?? []), move.at_ms]);
    }
    const handedBack = [...left.values()];
    const restarted = [...again.values()].map((times) => times[0]!);
    return {
      handoverMs: handedBack.length === args.tasks ? Math.max(...handedBack) - faultedAt : Number.NaN,
      afterReleaseMs: restarted.length === args.tasks && handedBack.length > 0 ? Math.max(...restarted) - Math.min(...handedBack) : Number.NaN,
      late: [],
      lost: args.tasks - restarted.length,
      movedTwice: [...again.values()].filter((times) => times.length > 1).length,
      falseTakeovers,
    };
  } finally {
    await endTrial(procs, database, dispose);
  }
}

/** A trial's end, however it went: its processes killed (a frozen one too), its database closed and dropped. */
async function endTrial(procs: readonly TriggererProcess[], database: Database, dispose: () => Promise<void>): Promise<void> {
  for (const proc of procs) {
    proc.kill('SIGCONT');
    proc.kill('SIGKILL');
  }
  await Promise.all(procs.map((proc) => proc.exit));
  await database.close();
  await dispose();
}

const hogs = Array.from({ length: args.hogs }, () => spawnChild(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
try {
  for (const fault of args.faults.split(',') as Fault[]) {
    if (!FAULTS.includes(fault)) throw new Error(`--faults: ${fault} is not one of ${FAULTS.join(', ')}`);
    const results: TrialResult[] = [];
    for (let n = 0; n < args.trials; n++) results.push(await (args.daemon === 'worker' ? workerTrial(fault, n) : trial(fault, n)));
    const times = results
      .map((result) => result.handoverMs)
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
    const afterRelease = results
      .map((result) => result.afterReleaseMs)
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
    const late = results.flatMap((result) => result.late).sort((a, b) => a - b);
    const sum = (key: 'lost' | 'movedTwice' | 'falseTakeovers') => results.reduce((total, result) => total + result[key], 0);
    console.log(
      JSON.stringify({
        dialect,
        daemon: args.daemon,
        fault,
        trials: args.trials,
        ...(args.daemon === 'worker' ? { tasks: args.tasks } : { triggers: args.triggers, span_s: args.span }),
        hogs: args.hogs,
        handover_p50_ms: Math.round(percentile(times, 0.5)),
        handover_p99_ms: Math.round(percentile(times, 0.99)),
        handover_max_ms: Math.round(times.at(-1) ?? Number.NaN),
        handover_missed: results.length - times.length,
        ...(afterRelease.length > 0
          ? { after_release_p50_ms: Math.round(percentile(afterRelease, 0.5)), after_release_p99_ms: Math.round(percentile(afterRelease, 0.99)) }
          : {}),
        late_samples: late.length,
        late_p99_ms: Math.round(percentile(late, 0.99)),
        late_max_ms: Math.round(late.at(-1) ?? Number.NaN),
        lost: sum('lost'),
        moved_twice: sum('movedTwice'),
        false_takeovers: sum('falseTakeovers'),
      }),
    );
  }
} finally {
  for (const hog of hogs) hog.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
}
