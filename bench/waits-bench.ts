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
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
  .option('samples', { type: 'number', default: 200, describe: 'signals timed one at a time, 20 ms apart' })
  .strict()
  .parse();

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
await database.close();
await target.dispose();
rmSync(scratch, { recursive: true, force: true });

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
