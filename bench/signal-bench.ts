/**
 * Push wake-up and signal latency benchmark: a worker, a scheduler and a triggerer in one process
 * but each on its own database handle (so nothing reaches another except through the database:
 * NOTIFY on PostgreSQL, the commit seen in the file on SQLite, or its next poll), all polling
 * every second, run once with pushes on and once with --no-push. Each case is timed from the
 * moment recorded by the code that caused it to the moment recorded by the code it woke.
 *
 *   npm run bench:signals [-- --db postgres://… | --db sqlite] [--samples N] [--modes push,no-push]
 *
 * `--db sqlite`: a new SQLite file for each mode, in a temporary folder; the idle lines (counted
 * on a PostgreSQL server) are left out.
 *
 * Prints one JSON line per case and mode, with p50, p99 and max in ms:
 *   defer_to_trigger_running       a task's defer() → its trigger's run() starts on the triggerer
 *   event_to_resumed               the trigger yields its event → the task's resumed method starts
 *   upstream_to_downstream         an upstream task returns → its downstream task's execute starts
 *   signal_to_resumed              sendSignal → a task waiting for it resumes
 *   signal_to_scheduled_run        sendSignal → the first task of the DAG scheduled on it starts
 *   signal_to_restarted            sendSignal → a finished task with a restart action on the key runs again (a new try)
 * and lines with idle_transactions_per_s, counted on the server (pg_stat_database) over 60 s (three
 * safety-net polls, twelve heartbeats: a whole number of each, or the count swings by a pass),
 * after 15 s for the counts of the busy cases to land: the three daemons doing nothing, then each
 * alone (a fresh one on its own connection pool, the others stopped).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase, sendSignal } from '../src/index.ts';
import {
  dagFileResolver,
  migrateToLatest,
  processDagFolder,
  resolveSchedulerOptions,
  resolveTriggererOptions,
  resolveWorkerOptions,
  Scheduler,
  serializedDagSource,
  Triggerer,
  triggerDagRun,
  TriggerRegistry,
  Worker,
} from '../src/internals.ts';
import { BUILTIN_TRIGGERS } from '../triggers/index.ts';
import { createScratchSchema } from '../test/support/pg-schemas.ts';
import { until } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', default: process.env.DEFERFLOW_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test' })
  .option('samples', { type: 'number', default: 40, describe: 'samples per case' })
  .option('modes', { type: 'string', default: 'push,no-push', describe: 'which modes to run, comma-separated' })
  .strict()
  .parse();

type Marks = Map<string, number>;
/** Wall-clock ms with sub-ms resolution, the same clock the marks below use. */
const now = () => performance.timeOrigin + performance.now();
const marks: Marks = new Map();
(globalThis as Record<string, unknown>).__deferflowBenchMarks = marks;

const root = mkdtempSync(path.join(os.tmpdir(), 'deferflow-signal-bench-'));
const dags = path.join(root, 'dags');
mkdirSync(dags);
const triggerModule = path.join(root, 'bench-triggers.mjs');
const entry = JSON.stringify(path.resolve(import.meta.dirname, '../src/index.ts'));
writeFileSync(
  triggerModule,
  `import { BaseTrigger, TriggerEvent } from ${entry};
const marks = globalThis.__deferflowBenchMarks;
export class MarkTrigger extends BaseTrigger {
  static classpath = 'bench.MarkTrigger';
  constructor({ id }) { super(); this.id = id; }
  serialize() { return { classpath: MarkTrigger.classpath, kwargs: { id: this.id } }; }
  async *run() {
    marks.set('trigger_running:' + this.id, performance.timeOrigin + performance.now());
    marks.set('event:' + this.id, performance.timeOrigin + performance.now());
    yield new TriggerEvent(this.id);
  }
}
`,
);
writeFileSync(
  path.join(dags, 'bench.mjs'),
  `import { BaseOperator, Dag } from ${entry};
import { MarkTrigger } from ${JSON.stringify(triggerModule)};
const marks = globalThis.__deferflowBenchMarks;
const now = () => performance.timeOrigin + performance.now();
class Defer extends BaseOperator {
  execute(context) {
    const id = context.dagRun.runId;
    marks.set('defer:' + id, now());
    return this.defer({ trigger: new MarkTrigger({ id }), method: 'resumed' });
  }
  resumed(context) { marks.set('resumed:' + context.dagRun.runId, now()); marks.set('upstream_done:' + context.dagRun.runId, now()); }
}
class Downstream extends BaseOperator { execute(context) { marks.set('downstream:' + context.dagRun.runId, now()); } }
class WaitSignal extends BaseOperator {
  async execute(context) { return this.waitForSignal(context, 'bench.' + context.dagRun.runId, { method: 'resumed' }); }
  resumed(context) { marks.set('signal_resumed:' + context.dagRun.runId, now()); }
}
class First extends BaseOperator { execute(context) { marks.set('scheduled_first:' + context.dagRun.conf.signal.version, now()); } }
class Restarted extends BaseOperator { execute(context) { marks.set('restarted_try:' + context.taskInstance.tryNumber, now()); } }
class Holds extends BaseOperator {
  async execute(context) { return this.waitForSignal(context, 'bench.release', { method: 'done' }); }
  done() {}
}
const hop = new Dag({ dagId: 'hop' });
const defer = new Defer({ taskId: 'defer' });
const downstream = new Downstream({ taskId: 'downstream' });
hop.add(defer, downstream);
defer.before(downstream);
export const wait = new Dag({ dagId: 'wait' }).add(new WaitSignal({ taskId: 'wait' }));
export const onSignal = new Dag({ dagId: 'on_signal', schedule: { signal: 'bench.scheduled' }, startDate: '2020-01-01T00:00:00Z' }).add(new First({ taskId: 'first' }));
export { hop };
// A run kept unfinished by 'hold', so each send on bench.restart runs 'again' as a new try.
export const restart = new Dag({ dagId: 'restart' }).add(new Restarted({ taskId: 'again', signals: [{ key: 'bench.restart', action: 'restart' }] }), new Holds({ taskId: 'hold' }));
`,
);

const sqlite = args.db.startsWith('sqlite');
const server = sqlite ? null : new pg.Client({ connectionString: args.db });
await server?.connect();
try {
  for (const mode of args.modes.split(',')) {
    if (mode !== 'push' && mode !== 'no-push') throw new Error(`--modes: ${mode} is not push or no-push`);
    await runMode(mode === 'push');
  }
} finally {
  await server?.end();
  rmSync(root, { recursive: true, force: true });
}

/** A new database for one mode: a SQLite file, or a scratch schema on the PostgreSQL server. */
async function scratchDatabase(push: boolean): Promise<{ url: string; drop: () => Promise<void> }> {
  if (sqlite) return { url: `sqlite:${path.join(root, `bench-${push ? 'push' : 'no-push'}.db`)}`, drop: async () => {} };
  const { name: schema, url } = await createScratchSchema(args.db, 'sigbench');
  return { url, drop: async () => void (await server!.query(`drop schema if exists ${schema} cascade`)) };
}

async function runMode(push: boolean): Promise<void> {
  marks.clear();
  const { url, drop } = await scratchDatabase(push);
  const setup = openDatabase(url);
  await migrateToLatest(setup);
  await processDagFolder(setup, dags);
  const log = pino({ level: 'warn' }, pino.destination(2));
  const raw = { databaseUrl: url, pollInterval: 1, push };
  const handles = [openDatabase(url), openDatabase(url), openDatabase(url)];
  const registry = new TriggerRegistry(BUILTIN_TRIGGERS);
  await registry.loadModule(triggerModule);
  const triggerer = new Triggerer(handles[0]!, resolveTriggererOptions({ ...raw }, {}), registry, log);
  const worker = new Worker(handles[1]!, resolveWorkerOptions({ ...raw, dagsFolder: dags, concurrency: 16 }, {}), dagFileResolver(handles[1]!), log);
  const scheduler = new Scheduler(handles[2]!, resolveSchedulerOptions({ ...raw }, {}), serializedDagSource(handles[2]!), log);
  await Promise.all([triggerer.start(), worker.start(), scheduler.start()]);
  try {
    // Let LISTEN connect and its probe come back.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const cases: Record<string, number[]> = {
      defer_to_trigger_running: [],
      event_to_resumed: [],
      upstream_to_downstream: [],
      signal_to_resumed: [],
      signal_to_scheduled_run: [],
      signal_to_restarted: [],
    };
    await triggerDagRun(setup, 'restart', { runId: 'restart' });
    await until(() => marks.has('restarted_try:1'));
    for (let i = 0; i < args.samples; i++) {
      const hop = await triggerDagRun(setup, 'hop', { runId: `hop_${i}` });
      await until(() => marks.has(`downstream:${hop}`));
      cases.defer_to_trigger_running!.push(marks.get(`trigger_running:${hop}`)! - marks.get(`defer:${hop}`)!);
      cases.event_to_resumed!.push(marks.get(`resumed:${hop}`)! - marks.get(`event:${hop}`)!);
      cases.upstream_to_downstream!.push(marks.get(`downstream:${hop}`)! - marks.get(`upstream_done:${hop}`)!);

      const wait = await triggerDagRun(setup, 'wait', { runId: `wait_${i}` });
      await until(async () => (await setup.db.selectFrom('task_instance').select('state').where('run_id', '=', wait).executeTakeFirst())?.state === 'deferred');
      // The trigger must be running (listening) on the triggerer: its row owned.
      await until(async () => (await setup.db.selectFrom('trigger').select('triggerer_id').executeTakeFirst())?.triggerer_id != null);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const sentAt = now();
      await sendSignal(setup, `bench.${wait}`, i);
      await until(() => marks.has(`signal_resumed:${wait}`));
      cases.signal_to_resumed!.push(marks.get(`signal_resumed:${wait}`)! - sentAt);

      const scheduledAt = now();
      const version = await sendSignal(setup, 'bench.scheduled', i);
      await until(() => marks.has(`scheduled_first:${version}`));
      cases.signal_to_scheduled_run!.push(marks.get(`scheduled_first:${version}`)! - scheduledAt);

      // The previous try must be recorded (success) before the next send restarts it.
      await until(
        async () => (await setup.db.selectFrom('task_instance').select('state').where('task_id', '=', 'again').executeTakeFirst())?.state === 'success',
      );
      const restartAt = now();
      await sendSignal(setup, 'bench.restart', i);
      await until(() => marks.has(`restarted_try:${i + 2}`));
      cases.signal_to_restarted!.push(marks.get(`restarted_try:${i + 2}`)! - restartAt);
    }
    // The restart run ends, so nothing waits while idle.
    await sendSignal(setup, 'bench.release');
    await until(async () => (await setup.db.selectFrom('dag_run').select('state').where('run_id', '=', 'restart').executeTakeFirst())?.state === 'success');
    for (const [name, samples] of Object.entries(cases)) console.log(JSON.stringify({ case: name, push, samples: samples.length, ...percentiles(samples) }));
    if (!server) return;
    console.log(JSON.stringify({ case: 'idle', daemons: 'triggerer+worker+scheduler', push, idle_transactions_per_s: await idleRate(server) }));
    await Promise.all([worker.stop(), scheduler.stop(), triggerer.stop()]);
    await Promise.all(handles.splice(0).map((handle) => handle.close()));
    // Each daemon alone, on a handle of its own: what one idle process costs the server.
    for (const kind of ['triggerer', 'worker', 'scheduler'] as const) {
      const handle = openDatabase(url);
      handles.push(handle);
      const daemon =
        kind === 'triggerer'
          ? new Triggerer(handle, resolveTriggererOptions({ ...raw }, {}), registry, log)
          : kind === 'worker'
            ? new Worker(handle, resolveWorkerOptions({ ...raw, dagsFolder: dags, concurrency: 16 }, {}), dagFileResolver(handle), log)
            : new Scheduler(handle, resolveSchedulerOptions({ ...raw }, {}), serializedDagSource(handle), log);
      await daemon.start();
      console.log(JSON.stringify({ case: 'idle', daemons: kind, push, idle_transactions_per_s: await idleRate(server) }));
      await daemon.stop();
    }
  } finally {
    await Promise.all([worker.stop(), scheduler.stop(), triggerer.stop()]);
    await Promise.all([...handles, setup].map((handle) => handle.close()));
    await drop();
  }
}

async function idleRate(server: pg.Client): Promise<number> {
  const count = async () =>
    Number((await server.query('select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()')).rows[0].n);
  // Backends report their counts to the statistics lazily (up to ~10 s late): let the busy
  // cases' counts land first, then count over 60 s: three safety-net polls (20 s) and twelve
  // heartbeats (5 s) whatever their phase.
  await new Promise((resolve) => setTimeout(resolve, 15_000));
  const before = await count();
  const started = Date.now();
  await new Promise((resolve) => setTimeout(resolve, 60_000));
  const after = await count();
  // Less this probe's own transaction.
  return Number(((after - before - 1) / ((Date.now() - started) / 1000)).toFixed(2));
}

function percentiles(samples: number[]) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => Number(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(1));
  return { p50_ms: at(0.5), p99_ms: at(0.99), max_ms: Number(sorted[sorted.length - 1]!.toFixed(1)) };
}
