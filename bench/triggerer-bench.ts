/**
 * Triggerer benchmark: N task instances deferred onto N distinct DateTimeTriggers due at one
 * moment, one triggerer process, and what it costs to hold them and to fire them.
 *
 *   npm run bench -- --db URL --triggers N [--lead SECONDS] [--baseline] [--encrypt] [--distinct-events]
 *
 * Prints one JSON line:
 *   n, dialect
 *   insert_ms               the benchmark's own insert of the N rows (1,000 a transaction; on
 *                           PostgreSQL, then ANALYZE, as autovacuum would)
 *   load_ms                 rows inserted → the triggerer runs all N (the time on its log line saying so);
 *                           the triggerer claims while the insert runs, so this is how far behind it ends
 *   rss_bytes               the triggerer's RSS with all N loaded
 *   rss_per_trigger_bytes   (that RSS − its RSS when idle) / N
 *   fire_p50_ms, fire_p99_ms, fire_max_ms
 *                           due moment → task instance committed as scheduled: the time on the
 *                           triggerer's "wrote N trigger events" line, logged as each batch's
 *                           COMMIT returns (polling the table every few ms instead would compete
 *                           with the triggerer for the two cores). Once all N are reported, the
 *                           database is checked to hold N scheduled task instances.
 *   moved_per_s             N / (due moment → last task instance committed)
 *   encrypted               whether --encrypt was given
 *   distinct_events         whether --distinct-events was given
 *
 * --encrypt: the triggerer gets an encryption key, and the rows are inserted with their kwargs
 * encrypted and their empty next_kwargs plain (as a worker with that key writes them): the
 * triggerer decrypts every trigger's kwargs as it claims it and encrypts every event payload as
 * it writes it.
 *
 * --baseline: afterwards, the same N deferrals (inserted anew in the emptied tables) are run by
 * the pure-Node reference, bench/baseline-triggerer.ts: one pending async generator per trigger
 * and batched updates, nothing of deferflow. The JSON gains `baseline` (the same figures for it)
 * and `ratio_to_baseline` (deferflow's fire_max_ms over the baseline's: due moment → the last
 * task instance committed).
 *
 * --distinct-events: each trigger's event is its own (bench/distinct-event-trigger.ts, loaded with
 * --trigger-module) instead of the moment all of them share; encrypted, each is sealed on its own
 * rather than once for a batch (see prepareMove in src/storage/move-deferred-task-instances.ts).
 *
 * The deferrals are bulk-inserted (a multi-row insert per 1,000), as deferTaskInstance would
 * write them with deduplication off (each row is its own wait, which is what is measured), each
 * transaction waking the triggerer as deferTaskInstance's does.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase, type Database } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { DateTimeTrigger } from '../triggers/index.ts';
import { DistinctEventTrigger } from './distinct-event-trigger.ts';
import { Keyring } from '../src/database/encryption/keyring.ts';
import { benchDatabase, insertDeferrals, percentile, type StoredTrigger, until } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'sqlite:PATH or postgres://… (default: a temporary SQLite file)' })
  .option('triggers', { type: 'number', default: 10_000, describe: 'N: deferred task instances, one trigger each' })
  .option('node-arg', { type: 'array', string: true, default: [] as string[], describe: 'extra node flags for the triggerer (e.g. --cpu-prof)' })
  .option('encrypt', { type: 'boolean', default: false, describe: 'encrypt kwargs and events at rest (see the README)' })
  .option('lead', { type: 'number', describe: 'seconds from insert to the due moment (default 5 + N/5000)' })
  .option('distinct-events', { type: 'boolean', default: false, describe: 'give each trigger an event of its own (see above)' })
  .option('baseline', { type: 'boolean', default: false, describe: 'then run the pure-Node reference on the same database and report the ratio (see above)' })
  .strict()
  .parse();

const n = args.triggers;
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-bench-'));

const keyEntry = args.encrypt ? Keyring.generateEntry('bench') : null;
const keyring = keyEntry ? Keyring.fromEntries([keyEntry], 'bench') : Keyring.none;
if (args.baseline && (args.encrypt || args['distinct-events'])) {
  process.stderr.write('--baseline compares plain runs with one event for all: leave out --encrypt and --distinct-events\n');
  process.exit(2);
}

/** What one run measured: see the top of the file. */
interface Run {
  insert_ms: number;
  load_ms: number;
  rss_bytes: number;
  rss_per_trigger_bytes: number;
  fire_p50_ms: number;
  fire_p99_ms: number;
  fire_max_ms: number;
  moved_per_s: number;
}

try {
  const deferflow = await measure('deferflow');
  const result: Record<string, unknown> = {
    n,
    dialect: deferflow.dialect,
    ...deferflow.run,
    encrypted: keyring.encrypting,
    distinct_events: args['distinct-events'],
  };
  if (args.baseline) {
    const baseline = (await measure('baseline')).run;
    result.baseline = baseline;
    result.ratio_to_baseline = Math.round((deferflow.run.fire_max_ms / Math.max(1, baseline.fire_max_ms)) * 100) / 100;
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

/**
 * One run: N deferrals due at one moment, taken by deferflow's triggerer (started first, it claims
 * while the benchmark inserts) or by the baseline (started once the rows are in: it loads them all
 * at once), each in a process of its own.
 */
async function measure(kind: 'deferflow' | 'baseline'): Promise<{ dialect: string; run: Run }> {
  // A database of its own (a fresh SQLite file or PostgreSQL schema, unless --db names a SQLite
  // file), so the second run does not find the first one's dead rows and grown indexes.
  const { url, dispose } = await benchDatabase(args.db, scratch, kind);
  const database = openDatabase(url);
  await migrateToLatest(database);
  // A sqlite: URL given is one file for both runs: each starts from empty tables.
  await database.db.deleteFrom('task_instance').execute();
  await database.db.deleteFrom('trigger').execute();
  const leadMs = (args.lead ?? 5 + n / 5000) * 1000;
  let insertStart = 0;
  let dueMs = 0;
  let inserted = 0;
  const insert = async () => {
    insertStart = Date.now();
    dueMs = insertStart + leadMs;
    await insertDeferrals(database, n, (i) => serializedTrigger(dueMs, i), keyring.seal('{}', 'task_instance.next_kwargs'));
    // What autovacuum does once a tenth of a table changed (this project's test servers run
    // without it): with no statistics PostgreSQL plans the claims for a few rows, and a claim
    // of 1,000 of a million took 650 ms instead of 30.
    if (database.adapter.name === 'postgres') await sql`analyze trigger, task_instance`.execute(database.db);
    inserted = Date.now();
  };
  if (kind === 'baseline') await insert();
  const child =
    kind === 'deferflow'
      ? spawnTriggerer(url)
      : spawn(process.execPath, ['--import', 'tsx', path.join(root, 'bench/baseline-triggerer.ts'), '--db', url], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout! });
  let running = 0;
  /** When the process logged all N running (its own clock, to the millisecond: polling every 20 ms would be coarser than PostgreSQL's load). */
  let allRunningAt: number | null = null;
  let started = kind === 'baseline';
  /** RSS before any trigger was loaded: sampled here for deferflow, reported by the baseline itself (it loads at start). */
  let idleRss = 0;
  /** [commit time, task instances moved] per event batch. */
  const commits: [number, number][] = [];
  let movedTotal = 0;
  lines.on('line', (line) => {
    try {
      const entry = JSON.parse(line) as {
        running?: number;
        job_id?: number;
        level?: number;
        msg?: string;
        kind?: string;
        time?: number;
        moved_task_instances?: number;
        idle_rss?: number;
      };
      if (typeof entry.job_id === 'number') started = true;
      if (typeof entry.idle_rss === 'number') idleRss = entry.idle_rss;
      if (typeof entry.running === 'number') {
        running = entry.running;
        if (running >= n && allRunningAt === null) allRunningAt = entry.time ?? Date.now();
      }
      if (entry.kind === 'event' && typeof entry.moved_task_instances === 'number') {
        commits.push([entry.time!, entry.moved_task_instances]);
        movedTotal += entry.moved_task_instances;
      }
      if ((entry.level ?? 0) >= 40)
        process.stderr.write(`${kind}: ${entry.msg}${'error' in entry ? ` (${String((entry as { error: unknown }).error)})` : ''}\n`);
    } catch {
      // Not a log line: what a --node-arg flag prints (--trace-gc), passed on.
      process.stderr.write(`${kind}: ${line}\n`);
    }
  });
  try {
    await until(() => started, { timeoutMs: 30_000, what: `the ${kind} process to start`, intervalMs: 20 });
    if (kind === 'deferflow') {
      await sleep(1000);
      idleRss = rssOf(child.pid!);
      await insert();
    }
    await until(() => running >= n, {
      timeoutMs: Math.max(1000, dueMs - Date.now()),
      what: `the ${kind} process to run all ${n} triggers before the due moment`,
      intervalMs: 20,
    });
    const loadMs = Math.max(0, allRunningAt! - inserted);
    await sleep(Math.min(1000, Math.max(0, dueMs - Date.now() - 200)));
    const loadedRss = rssOf(child.pid!);

    await until(() => movedTotal >= n, { timeoutMs: dueMs + 120_000 - Date.now(), what: `all ${n} task instances to be scheduled`, intervalMs: 20 });
    await expectScheduled(database, n);
    const latencies = commits.flatMap(([time, moved]) => Array.from({ length: moved }, () => Math.max(0, time - dueMs))).sort((a, b) => a - b);
    const last = latencies[latencies.length - 1]!;
    const run = {
      insert_ms: inserted - insertStart,
      load_ms: loadMs,
      rss_bytes: loadedRss,
      rss_per_trigger_bytes: Math.round((loadedRss - idleRss) / n),
      fire_p50_ms: percentile(latencies, 0.5),
      fire_p99_ms: percentile(latencies, 0.99),
      fire_max_ms: last,
      moved_per_s: Math.round(n / (Math.max(last, 1) / 1000)),
    };
    return { dialect: database.adapter.name, run };
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    await database.close();
    await dispose();
  }
}

function spawnTriggerer(url: string) {
  return spawn(
    process.execPath,
    [
      ...args['node-arg'].map(String),
      path.join(root, 'bin/triggerer.js'),
      '--db',
      url,
      '--capacity',
      String(n),
      '--claims-per-loop',
      '10000',
      '--poll-interval',
      '0.5',
      '--log-level',
      'info',
      ...(args['distinct-events'] ? ['--trigger-module', path.join(root, 'bench/distinct-event-trigger.ts')] : []),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, DEFERFLOW_ENCRYPTION_KEYS: keyEntry ?? '' } },
  );
}

/** The row's classpath and kwargs (sealed with --encrypt) for trigger `tag`, due at `dueMs`. */
function serializedTrigger(dueMs: number, tag: number): StoredTrigger {
  const trigger = new DateTimeTrigger({ moment: new Date(dueMs) });
  const { classpath, kwargs } = args['distinct-events'] ? new DistinctEventTrigger({ moment: trigger.moment, tag }).serialize() : trigger.serialize();
  return { classpath, kwargs: keyring.seal(JSON.stringify(kwargs), 'trigger.kwargs') };
}

/** What the triggerer reported, checked against the database. */
async function expectScheduled({ db }: Database, count: number): Promise<void> {
  const row = await db
    .selectFrom('task_instance')
    .select((eb) => eb.fn.countAll<number>().as('scheduled'))
    .where('state', '=', 'scheduled')
    .executeTakeFirstOrThrow();
  if (Number(row.scheduled) !== count) throw new Error(`the triggerer reported ${count} task instances scheduled; the database holds ${row.scheduled}`);
}

function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1]);
  return kb * 1024;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
