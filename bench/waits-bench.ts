/**
 * Composite waits benchmark: N task instances each waiting on anyOf([a signal on a key of its
 * own, a timer an hour ahead]), the timers on `--timers` distinct moments (so each timer row is
 * shared by N / timers waits), one triggerer process; then a signal for each task.
 *
 *   npm run bench:waits -- [--db postgres://…] [--tasks 10000] [--timers 100] [--samples 200]
 *
 * Prints one JSON line:
 *   tasks, timers, dialect
 *   defer_ms                  the N deferrals, one deferTaskInstance each, as workers write them
 *   trigger_rows_at_peak      rows while every task waits (N composites, N signal members, the timers)
 *   rss_per_waiting_task_bytes  (the triggerer's RSS running all of them − its RSS idle) / N
 *   signal_to_resumed_p50_ms, _p99_ms, _max_ms
 *                             sendSignal returns → the task instance committed as scheduled (its
 *                             updated_at, written by the triggerer's transaction), for `--samples`
 *                             signals sent 20 ms apart while the others wait
 *   all_signals_ms            the other signals sent one after another → every task resumed
 *   timer_rows_left, trigger_rows_left
 *                             once every task resumed and the triggerer deleted what nothing needs:
 *                             the timers are stopped (their rows gone) though none fired
 *
 * Then human input (`--input-tasks`, default 1000; 0 skips it): a DAG run of that many tasks
 * that each ask a person (awaitInput), run by deferflow embedded as a user would (scheduler and
 * worker, task code in runner processes, `--slots` slots); once all await input, a second line:
 *   input_tasks, dialect, slots
 *   ask_all_ms                the run triggered → every task instance awaiting input
 *   trigger_rows_awaiting     trigger rows while they all wait (no trigger stands for a question: 0)
 *   slots_held_awaiting       task instances queued or running, or held by a worker, meanwhile (0)
 *   respond_to_resumed_p50_ms, _p99_ms, _max_ms
 *                             respondToInput called → the task instance committed success by the
 *                             worker (its method resumed with the response and returned), for
 *                             `--samples` responses one at a time
 *   all_responses_ms          the other responses given one after another → every task done
 *   timed_out, deadline_to_defaults_p50_ms, _p99_ms, _min_ms, _max_ms
 *                             200 more tasks whose questions (3 s timeout, with defaults) nobody
 *                             answers: the deadline → the defaults recorded by the scheduler's sweep
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import pino from 'pino';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { anyOf, SignalTrigger, TaskDeferred } from '../src/index.ts';
import { openDatabase } from '../src/database/connect.ts';
import { fromDbTime } from '../src/database/schema.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { openStores } from '../src/storage/index.ts';
import { SignalService } from '../src/services/signals/signal-service.ts';
import { DateTimeTrigger } from '../triggers/index.ts';
import { benchDatabase, percentile, until } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'postgres://… (a scratch schema is made and dropped); default: a SQLite file' })
  .option('tasks', { type: 'number', default: 10_000 })
  .option('timers', { type: 'number', default: 100 })
  .option('samples', { type: 'number', default: 200, describe: 'signals (and responses) timed one at a time, 20 ms apart' })
  .option('input-tasks', { type: 'number', default: 1000, describe: 'tasks awaiting human input in the second phase; 0 skips it' })
  .option('slots', { type: 'number', default: 16, describe: 'worker slots in the human-input phase' })
  .strict()
  .parse();
/** Questions of the human-input phase nobody answers, and their timeout in seconds. */
const TIMED_OUT = 200;
const TIMEOUT_S = 3;
// The human-input phase embeds the built package, as a user's project would.

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-waits-bench-'));
const target = await benchDatabase(args.db, scratch, 'waits');
const database = openDatabase(target.url);
await migrateToLatest(database);
const storage = openStores(database);
const dialect = database.target.dialect;

// A triggerer first, idle: its RSS before anything waits.
const triggerer = spawn(
  process.execPath,
  [
    path.join(root, 'bin/triggerer.js'),
    '--db',
    target.url,
    '--capacity',
    String(args.tasks * 2 + args.timers),
    '--claims-per-loop',
    '10000',
    '--log-level',
    'info',
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
// A run that fails half-way does not leave its triggerer behind.
process.on('exit', () => triggerer.kill('SIGKILL'));
let started = false;
readline.createInterface({ input: triggerer.stdout! }).on('line', (line) => {
  if (line.includes('started on')) started = true;
  // Warnings and errors of the triggerer are the benchmark's to show.
  if (/"level":(40|50|60)/.test(line)) console.error(line);
});
await until(() => started, { what: 'the triggerer started' });
await sleep(1000);
const idleRss = rssOf(triggerer.pid!);

const firstMoment = Date.now() + 3_600_000;
const deferStart = Date.now();
const ids: number[] = [];
for (let i = 0; i < args.tasks; i++) {
  const id = await storage.taskInstances.createTaskInstance({
    dagId: 'waits',
    taskId: `wait_${i}`,
    runId: 'bench',
    mapIndex: -1,
    state: 'running',
    priorityWeight: 1,
    maxTries: 0,
    operator: null,
  });
  const trigger = anyOf([
    new SignalTrigger({ key: `bench.${i}`, sinceVersion: 0 }),
    new DateTimeTrigger({ moment: new Date(firstMoment + (i % args.timers) * 1000) }),
  ]);
  await storage.taskInstances.deferTaskInstance(id!, new TaskDeferred({ trigger, method: 'resume' }));
  ids.push(id!);
}
const deferMs = Date.now() - deferStart;
const peakRows = await countRows();
await until(async () => (await countRows('unowned')) === 0, { timeoutMs: 120_000, intervalMs: 100, what: 'the triggerer holding every row' });
await sleep(2000);
const loadedRss = rssOf(triggerer.pid!);

const signals = SignalService.of(database);
const latencies: number[] = [];
for (let i = 0; i < Math.min(args.samples, args.tasks); i++) {
  await signals.send(`bench.${i}`, 'go');
  const sentAt = Date.now();
  await until(async () => (await resumedAt(ids[i]!)) !== null, { timeoutMs: 30_000, intervalMs: 1, what: `task ${i} resumed` });
  latencies.push(Math.max(0, (await resumedAt(ids[i]!))! - sentAt));
  await sleep(20);
}
const restStart = Date.now();
for (let i = args.samples; i < args.tasks; i++) await signals.send(`bench.${i}`, 'go');
await until(async () => (await countScheduled()) === args.tasks, { timeoutMs: 300_000, intervalMs: 50, what: 'every task resumed' });
const allSignalsMs = Date.now() - restStart;
await until(async () => (await countRows()) === 0, { timeoutMs: 60_000, intervalMs: 100, what: 'every row deleted' }).catch(() => {});
const sorted = [...latencies].sort((a, b) => a - b);
const resumedWithSignal = await database.db.selectFrom('task_instance').select('next_event').where('id', '=', ids[0]!).executeTakeFirstOrThrow();
if ((JSON.parse(String(resumedWithSignal.next_event)) as { index?: number }).index !== 0)
  throw new Error(`task 0 resumed with ${String(resumedWithSignal.next_event)}, not its signal`);

console.log(
  JSON.stringify({
    tasks: args.tasks,
    timers: args.timers,
    dialect,
    defer_ms: deferMs,
    trigger_rows_at_peak: peakRows,
    rss_per_waiting_task_bytes: Math.round((loadedRss - idleRss) / args.tasks),
    signal_to_resumed_p50_ms: percentile(sorted, 0.5),
    signal_to_resumed_p99_ms: percentile(sorted, 0.99),
    signal_to_resumed_max_ms: sorted.at(-1),
    all_signals_ms: allSignalsMs,
    timer_rows_left: await countRows('timers'),
    trigger_rows_left: await countRows(),
  }),
);
triggerer.kill('SIGTERM');
await new Promise((resolve) => triggerer.once('exit', resolve));
if (args['input-tasks'] > 0) console.log(JSON.stringify(await humanInput(args['input-tasks'])));
await database.close();
await target.dispose();
rmSync(scratch, { recursive: true, force: true });

/** The human-input phase (see the top of this file), on the same database. */
async function humanInput(tasks: number) {
  const dags = path.join(scratch, 'input-dags');
  mkdirSync(dags);
  const entry = path.join(root, 'dist/src/index.js');
  writeFileSync(
    path.join(dags, 'ask.mts'),
    `import { BaseOperator, Dag } from ${JSON.stringify(entry)};
class Ask extends BaseOperator {
  async execute(context) { return this.awaitInput(context, { subject: 'Go?', options: ['yes', 'no'], method: 'answered' }); }
  answered(context, response) { return response.chosen[0]; }
}
export const dag = new Dag({ dagId: 'ask_people' }).add(...Array.from({ length: ${tasks} }, (_, i) => new Ask({ taskId: 'ask_' + i })));
class AskBriefly extends BaseOperator {
  async execute(context) {
    return this.awaitInput(context, { subject: 'Go?', options: ['yes', 'no'], defaults: { chosen: ['no'] }, timeout: ${TIMEOUT_S}, method: 'answered' });
  }
  answered(context, response) { return response.chosen[0]; }
}
export const timeouts = new Dag({ dagId: 'time_out' }).add(...Array.from({ length: ${TIMED_OUT} }, (_, i) => new AskBriefly({ taskId: 'ask_' + i })));
`,
  );
  // The first phase's task instances (resumed, of no DAG a worker knows) are not this phase's work.
  await database.db.deleteFrom('task_instance').where('dag_id', '=', 'waits').execute();
  const { deferflow } = (await import(entry)) as typeof import('../src/index.ts');
  const app = await deferflow({
    databaseUrl: target.url,
    dagsFolder: dags,
    worker: { concurrency: args.slots, shutdownGrace: 0 },
    triggerer: false,
    logger: pino({ level: 'warn' }, pino.destination(2)),
  });
  try {
    const triggeredAt = Date.now();
    await app.triggerDagRun('ask_people');
    await until(async () => (await countInState('awaiting_input')) === tasks, { timeoutMs: 600_000, intervalMs: 50, what: 'every task awaiting input' });
    const askAllMs = Date.now() - triggeredAt;
    const triggerRows = await countRows();
    const held = await database.db
      .selectFrom('task_instance')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('dag_id', '=', 'ask_people')
      .where((eb) => eb.or([eb('state', 'in', ['queued', 'running']), eb('worker_job_id', 'is not', null)]))
      .executeTakeFirstOrThrow();
    const ids = (await database.db.selectFrom('task_instance').select('id').where('dag_id', '=', 'ask_people').orderBy('id').execute()).map((row) => row.id);
    const latencies: number[] = [];
    const samples = Math.min(args.samples, tasks);
    for (let i = 0; i < samples; i++) {
      const given = Date.now();
      await app.respondToInput(ids[i]!, { chosen: ['yes'], by: 'bench' });
      await until(async () => (await endedAt(ids[i]!)) !== null, { timeoutMs: 30_000, intervalMs: 1, what: `task ${i} resumed` });
      latencies.push(Math.max(0, (await endedAt(ids[i]!))! - given));
      await sleep(20);
    }
    const restStart = Date.now();
    for (let i = samples; i < tasks; i++) await app.respondToInput(ids[i]!, { chosen: ['yes'], by: 'bench' });
    await until(async () => (await countInState('success')) === tasks, { timeoutMs: 600_000, intervalMs: 50, what: 'every task done' });
    const all = Date.now() - restStart;
    const sorted = latencies.sort((a, b) => a - b);
    // Questions nobody answers: their defaults, at the deadline.
    await app.triggerDagRun('time_out');
    await until(
      async () => {
        const row = await database.db
          .selectFrom('task_input')
          .innerJoin('task_instance', 'task_instance.id', 'task_input.task_instance_id')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('task_instance.dag_id', '=', 'time_out')
          .where('task_input.responded_at', 'is not', null)
          .executeTakeFirstOrThrow();
        return Number(row.n) === TIMED_OUT;
      },
      { timeoutMs: 120_000, intervalMs: 100, what: 'every question answered by its defaults' },
    );
    const late = (
      await database.db
        .selectFrom('task_input')
        .innerJoin('task_instance', 'task_instance.id', 'task_input.task_instance_id')
        .select(['task_input.timeout_at', 'task_input.responded_at', 'task_input.response_source'])
        .where('task_instance.dag_id', '=', 'time_out')
        .execute()
    )
      .map((row) => {
        if (row.response_source !== 'timeout') throw new Error(`a question of time_out was answered by ${row.response_source}, not its timeout`);
        return fromDbTime(row.responded_at!) - fromDbTime(row.timeout_at!);
      })
      .sort((a, b) => a - b);
    return {
      input_tasks: tasks,
      dialect,
      slots: args.slots,
      ask_all_ms: askAllMs,
      trigger_rows_awaiting: triggerRows,
      slots_held_awaiting: Number(held.n),
      respond_to_resumed_p50_ms: percentile(sorted, 0.5),
      respond_to_resumed_p99_ms: percentile(sorted, 0.99),
      respond_to_resumed_max_ms: sorted.at(-1),
      all_responses_ms: all,
      timed_out: TIMED_OUT,
      deadline_to_defaults_p50_ms: percentile(late, 0.5),
      deadline_to_defaults_p99_ms: percentile(late, 0.99),
      deadline_to_defaults_min_ms: late[0],
      deadline_to_defaults_max_ms: late.at(-1),
    };
  } finally {
    await app.stop({ keepDatabaseOpen: true });
  }

  async function countInState(state: 'awaiting_input' | 'success'): Promise<number> {
    const row = await database.db
      .selectFrom('task_instance')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('dag_id', '=', 'ask_people')
      .where('state', '=', state)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async function endedAt(id: number): Promise<number | null> {
    const row = await database.db.selectFrom('task_instance').select(['state', 'end_date']).where('id', '=', id).executeTakeFirstOrThrow();
    return row.state === 'success' ? fromDbTime(row.end_date!) : null;
  }
}

async function countRows(which: 'all' | 'unowned' | 'timers' = 'all'): Promise<number> {
  let query = database.db.selectFrom('trigger').select((eb) => eb.fn.countAll().as('n'));
  if (which === 'unowned') query = query.where('triggerer_id', 'is', null);
  if (which === 'timers') query = query.where('classpath', '=', DateTimeTrigger.classpath);
  return Number((await query.executeTakeFirstOrThrow()).n);
}

async function countScheduled(): Promise<number> {
  const row = await database.db
    .selectFrom('task_instance')
    .select((eb) => eb.fn.countAll().as('n'))
    .where('state', '=', 'scheduled')
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

async function resumedAt(id: number): Promise<number | null> {
  const row = await database.db.selectFrom('task_instance').select(['state', 'updated_at']).where('id', '=', id).executeTakeFirstOrThrow();
  return row.state === 'scheduled' ? fromDbTime(row.updated_at!) : null;
}

function rssOf(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb * 1024;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
