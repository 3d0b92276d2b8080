/**
 * The status page under load: N deferred task instances (each on its own trigger, owned by a
 * triggerer row) and R finished runs of a ten-task DAG (10 × R task instances more), a day of
 * minute samples of seven daemons (the charts' most) and 1,000 audit entries, then
 * `deferflow web` is started on the database and each page is fetched `--requests` times in turn;
 * prints one JSON line with each page's p50 / p99 / max in ms.
 *
 *   npm run bench:web -- --tis 10000 --runs 1000
 *   npm run bench:web -- --tis 10000 --runs 1000 --db postgres://postgres@127.0.0.1:5432/test
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase, type Database } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { TRIGGERER_JOB_TYPE, toDbTime } from '../src/database/schema.ts';
import { benchDatabase, percentile } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'sqlite:PATH or postgres://… (default: a temporary SQLite file)' })
  .option('tis', { type: 'number', default: 10_000, describe: 'deferred task instances, one trigger each' })
  .option('runs', { type: 'number', default: 1000, describe: 'finished runs of a ten-task DAG (its grid, a run, a task instance)' })
  .option('wide', { type: 'number', default: 5000, describe: 'task instances of one more run (a run page, its timeline)' })
  .option('requests', { type: 'number', default: 50, describe: 'fetches of each page' })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-web-bench-'));
const { url, dispose } = await benchDatabase(args.db, scratch);
const database = openDatabase(url);
await migrateToLatest(database);
const firstId = await insertDeferred(database, args.tis);
const history = await insertFinishedRuns(database, args.runs);
const wideRunId = await insertWideRun(database, args.wide);
await insertConsoleHistory(database);

const web = spawn(process.execPath, [path.join(root, 'bin/deferflow.js'), 'web', '--db', url, '--http-port', '0', '--log-level', 'warn'], {
  stdio: ['ignore', 'pipe', 'inherit'],
});
try {
  const base = await new Promise<string>((resolve, reject) => {
    const lines = readline.createInterface({ input: web.stdout! });
    lines.on('line', (line) => {
      if (line.startsWith('status page: ')) resolve(line.slice('status page: '.length).replace(/\/$/, ''));
    });
    web.once('exit', (code) => reject(new Error(`deferflow web exited ${code}`)));
  });
  const middle = firstId + Math.floor(args.tis / 2);
  const pages = {
    overview: '/',
    deferred_first_page: '/deferred',
    deferred_middle_page: `/deferred?after=${middle}`,
    triggers_first_page: '/triggers',
    daemons: '/daemons',
    dags: '/dags',
    dag_with_grid: '/dags/history',
    dag_grid_failed_runs: '/dags/history?state=failed',
    run: `/dags/history/runs/${encodeURIComponent(history.middleRunId)}`,
    wide_run: `/dags/wide/runs/${encodeURIComponent(wideRunId)}`,
    task_instance: `/ti/${history.failedTaskInstanceId}`,
    charts: '/charts',
    charts_24h: '/charts?hours=24',
    audit: '/audit',
    signals: '/signals',
  };
  const result: Record<string, unknown> = { tis: args.tis, runs: args.runs, wide: args.wide, dialect: database.adapter.name, requests: args.requests };
  for (const [name, pagePath] of Object.entries(pages)) {
    const times: number[] = [];
    for (let i = 0; i < args.requests; i++) {
      const started = performance.now();
      const response = await fetch(`${base}${pagePath}`);
      const body = await response.text();
      times.push(performance.now() - started);
      if (response.status !== 200) throw new Error(`GET ${pagePath} answered ${response.status}: ${body.slice(0, 200)}`);
      if (name.startsWith('deferred') && !body.includes('data-ti=')) throw new Error(`GET ${pagePath} lists no deferred task instance`);
    }
    times.sort((a, b) => a - b);
    result[name] = { p50_ms: round(percentile(times, 0.5)), p99_ms: round(percentile(times, 0.99)), max_ms: round(times.at(-1)!) };
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
} finally {
  web.kill('SIGTERM');
  await new Promise((resolve) => web.once('exit', resolve));
  await database.close();
  await dispose();
  rmSync(scratch, { recursive: true, force: true });
}

/** One finished run of DAG `wide` with `count` task instances (each ran a second): its page is the largest timeline. */
async function insertWideRun({ db }: Database, count: number): Promise<string> {
  const runId = 'manual__wide';
  const start = Date.parse('2026-02-01T00:00:00Z');
  await db
    .insertInto('dag_run')
    .values({
      dag_id: 'wide',
      run_id: runId,
      run_type: 'manual',
      logical_date: toDbTime(start),
      state: 'success',
      conf: '{}',
      created_at: toDbTime(start),
      start_date: toDbTime(start),
      end_date: toDbTime(start + count * 100 + 1000),
      updated_at: toDbTime(start + count * 100 + 1000),
    })
    .execute();
  for (let first = 0; first < count; first += 500) {
    const size = Math.min(500, count - first);
    await db
      .insertInto('task_instance')
      .values(
        Array.from({ length: size }, (_, i) => ({
          dag_id: 'wide',
          task_id: `task_${String(first + i).padStart(5, '0')}`,
          run_id: runId,
          state: 'success' as const,
          try_number: 1,
          start_date: toDbTime(start + (first + i) * 100),
          end_date: toDbTime(start + (first + i) * 100 + 1000),
          updated_at: toDbTime(start + (first + i) * 100 + 1000),
        })),
      )
      .execute();
  }
  return runId;
}

/**
 * R finished runs (one a minute, every fifth failed) of DAG `history`, ten tasks each, its file
 * serialized as DAG processing does; returns a run in the middle and a failed task instance of it.
 */
async function insertFinishedRuns({ db }: Database, count: number): Promise<{ middleRunId: string; failedTaskInstanceId: number }> {
  const dags = path.join(scratch, 'dags');
  mkdirSync(dags);
  writeFileSync(
    path.join(dags, 'history.mjs'),
    `import { BaseOperator, Dag } from ${JSON.stringify(path.join(root, 'dist/src/index.js'))};
class Step extends BaseOperator { execute() { return { ok: true }; } }
const steps = Array.from({ length: 10 }, (_, i) => new Step({ taskId: 'step_' + i }));
export const dag = new Dag({ dagId: 'history' }).add(...steps);
for (let i = 1; i < steps.length; i++) steps[i - 1].before(steps[i]);
`,
  );
  const serialized = spawnSync(process.execPath, [path.join(root, 'bin/deferflow.js'), 'dags', 'reserialize', '--db', url, '--dags', dags], {
    encoding: 'utf8',
  });
  if (serialized.status !== 0) throw new Error(`dags reserialize failed: ${serialized.stderr}`);
  const first = Date.parse('2026-01-01T00:00:00Z');
  const runId = (n: number) => `scheduled__${new Date(first + n * 60_000).toISOString()}`;
  let failedTaskInstanceId = 0;
  for (let start = 0; start < count; start += 100) {
    const size = Math.min(100, count - start);
    await db.transaction().execute(async (trx) => {
      const runs = Array.from({ length: size }, (_, i) => start + i);
      await trx
        .insertInto('dag_run')
        .values(
          runs.map((n) => ({
            dag_id: 'history',
            run_id: runId(n),
            run_type: 'scheduled' as const,
            logical_date: toDbTime(first + n * 60_000),
            state: n % 5 === 4 ? ('failed' as const) : ('success' as const),
            conf: '{}',
            created_at: toDbTime(first + n * 60_000),
            start_date: toDbTime(first + n * 60_000),
            end_date: toDbTime(first + n * 60_000 + 30_000),
            updated_at: toDbTime(first + n * 60_000 + 30_000),
          })),
        )
        .execute();
      const tis = await trx
        .insertInto('task_instance')
        .values(
          runs.flatMap((n) =>
            Array.from({ length: 10 }, (_, task) => ({
              dag_id: 'history',
              task_id: `step_${task}`,
              run_id: runId(n),
              state: n % 5 === 4 && task === 9 ? ('failed' as const) : ('success' as const),
              try_number: 1,
              start_date: toDbTime(first + n * 60_000 + task * 1000),
              end_date: toDbTime(first + n * 60_000 + task * 1000 + 500),
              return_value: n % 5 === 4 && task === 9 ? null : JSON.stringify({ ok: true }),
            })),
          ),
        )
        .returning(['id', 'run_id', 'state'])
        .execute();
      const failed = tis.find((ti) => ti.state === 'failed' && ti.run_id === runId(Math.floor(count / 2 / 5) * 5 + 4));
      if (failed) failedTaskInstanceId = failed.id;
    });
  }
  return { middleRunId: runId(Math.floor(count / 2)), failedTaskInstanceId };
}

/** A day of minute samples from 3 triggerers, 3 workers and a scheduler (the charts' most, kept a day), and 1,000 audit log entries. */
async function insertConsoleHistory({ db }: Database): Promise<void> {
  const now = Date.now();
  const daemons = [
    ...[1, 2, 3].map((i) => ({
      jobId: 9000 + i,
      jobType: 'TriggererJob',
      figures: (m: number) => ({ running: 300 + (m % 50), capacity: 1000, events: m % 7, failures: m % 97 === 0 ? 1 : 0, blocked_ms: 0, interval_ms: 60_000 }),
    })),
    ...[4, 5, 6].map((i) => ({ jobId: 9000 + i, jobType: 'WorkerJob', figures: (m: number) => ({ slots_used: m % 16, slots: 16, interval_ms: 60_000 }) })),
    { jobId: 9007, jobType: 'SchedulerJob', figures: (m: number) => ({ deferred: 10_000 + m, awaiting_input: m % 5, interval_ms: 60_000 }) },
  ];
  for (const daemon of daemons)
    for (let start = 0; start < 1440; start += 500)
      await db
        .insertInto('daemon_sample')
        .values(
          Array.from({ length: Math.min(500, 1440 - start) }, (_, i) => ({
            job_id: daemon.jobId,
            job_type: daemon.jobType,
            at: toDbTime(now - (1440 - start - i) * 60_000),
            figures: JSON.stringify(daemon.figures(start + i)),
          })),
        )
        .execute();
  for (let start = 0; start < 1000; start += 500)
    await db
      .insertInto('audit_log')
      .values(
        Array.from({ length: 500 }, (_, i) => ({
          at: toDbTime(now - (1000 - start - i) * 60_000),
          actor: 'bench',
          source: 'cli' as const,
          address: 'bench-host',
          action: 'clear',
          dag_id: 'history',
          run_id: 'scheduled__2026-01-01T00:00:00.000Z',
          task_instance_id: null,
          details: JSON.stringify({ task_ids: ['step_1'] }),
          outcome: 'cleared 1 task instance(s); stopped 0 trigger(s)',
        })),
      )
      .execute();
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/** N deferred task instances of one run, each on its own trigger owned by a live triggerer row; returns the first task instance id. */
async function insertDeferred({ db }: Database, count: number): Promise<number> {
  const now = toDbTime(Date.now());
  const job = await db
    .insertInto('job')
    .values({ job_type: TRIGGERER_JOB_TYPE, state: 'running', hostname: 'bench', pid: 1, capacity: count, start_date: now, latest_heartbeat: now })
    .returning('id')
    .executeTakeFirstOrThrow();
  let firstId = 0;
  for (let start = 0; start < count; start += 1000) {
    const size = Math.min(1000, count - start);
    await db.transaction().execute(async (trx) => {
      const triggers = await trx
        .insertInto('trigger')
        .values(
          Array.from({ length: size }, (_, i) => ({
            classpath: 'deferflow.triggers.DateTimeTrigger',
            kwargs: JSON.stringify({ moment: new Date(Date.now() + 3_600_000 + i).toISOString() }),
            created_at: now,
            triggerer_id: job.id,
            hash: null,
          })),
        )
        .returning('id')
        .execute();
      const tis = await trx
        .insertInto('task_instance')
        .values(
          triggers.map((trigger, i) => ({
            dag_id: 'bench',
            task_id: `wait_${start + i}`,
            run_id: 'bench__1',
            state: 'deferred' as const,
            try_number: 1,
            next_method: 'resume',
            next_kwargs: '{}',
            trigger_id: trigger.id,
            trigger_timeout: toDbTime(Date.now() + 7_200_000),
          })),
        )
        .returning(['id', 'trigger_id'])
        .execute();
      if (firstId === 0) firstId = tis[0]!.id;
      await trx
        .insertInto('trigger_wait')
        .values(tis.map((ti) => ({ task_instance_id: ti.id, try_number: 1, trigger_id: ti.trigger_id!, waited_from: now })))
        .execute();
    });
  }
  return firstId;
}
