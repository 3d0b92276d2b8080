/**
 * Runtime benchmark: one DAG run of N tasks that each defer D seconds on a TimeDeltaTrigger,
 * run by scheduler, worker (S slots) and triggerer in one process, as `deferflow standalone`
 * runs them.
 *
 *   npm run bench:runtime [-- --db URL] [--tasks N] [--slots S] [--delay D] [--isolation process|none] [--runner-max-tasks M]
 *
 * Without --db it runs on a temporary SQLite file, then on a scratch schema of the PostgreSQL
 * server at DEFERFLOW_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test); without
 * --isolation, each with task code in runner processes (the default) and then on the worker's
 * own loop, so the lines show what isolation costs. It runs the build, as a user's project would.
 * Prints one JSON line per run:
 *   dialect, task_isolation, tasks, slots, delay_s
 *   wall_ms        the DAG run's start_date → end_date, as the scheduler recorded them
 *   slot_seconds   worker slot time spent: for each task instance run (execute, then resume),
 *                  its claim until its outcome was recorded
 *   blocking_s     what the same tasks would need as blocking waits: N × D / S
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { Duration } from 'luxon';
import { deferflow } from '../dist/src/index.js';
import { fromDbTime, parseDatabaseUrl } from '../dist/src/internals.js';
import { createScratchSchema } from '../test/support/pg-schemas.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'sqlite:PATH or postgres://… (default: SQLite, then PostgreSQL)' })
  .option('tasks', { type: 'number', default: 1000, describe: 'N: tasks in the DAG, each deferring once' })
  .option('slots', { type: 'number', default: 8, describe: 'S: worker slots' })
  .option('delay', { type: 'number', default: 5, describe: 'D: seconds each task waits on its trigger' })
  .option('runner-max-tasks', { type: 'number', default: 1000, describe: 'tasks a runner process runs before it is replaced' })
  .option('isolation', { choices: ['process', 'none'] as const, describe: 'where task code runs (default: both, one after the other)' })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const targets = args.db ? [args.db] : ['sqlite', process.env.DEFERFLOW_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'];
const isolations = args.isolation ? [args.isolation] : (['process', 'none'] as const);
for (const target of targets) for (const isolation of isolations) console.log(JSON.stringify(await runOnce(target, isolation)));

async function runOnce(target: string, isolation: 'process' | 'none') {
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-runtime-bench-'));
  const { url, dispose } = await prepareDatabase(target, scratch);
  const dags = path.join(scratch, 'dags');
  mkdirSync(dags);
  writeFileSync(path.join(dags, 'bench.mts'), dagSource(args.tasks, args.delay));

  // Embedded as a user would: the public API, all three components in this process.
  const app = await deferflow({
    databaseUrl: url,
    dagsFolder: dags,
    worker: { concurrency: args.slots, shutdownGrace: Duration.fromMillis(0), taskIsolation: isolation, runnerMaxTasks: args['runner-max-tasks'] },
    triggerer: { capacity: Math.max(1000, args.tasks) },
    logger: pino({ level: 'warn' }, pino.destination(2)),
  });
  const database = app.database;
  try {
    const runId = await app.triggerDagRun('runtime_bench');
    const deadline = Date.now() + 120_000 + args.tasks * args.delay * 1000;
    for (;;) {
      const run = await database.db.selectFrom('dag_run').select(['state', 'start_date', 'end_date']).where('run_id', '=', runId).executeTakeFirstOrThrow();
      if (run.state === 'success' || run.state === 'failed') {
        if (run.state === 'failed') throw new Error('the benchmark run failed (see the log above)');
        return {
          dialect: parseDatabaseUrl(url).dialect,
          task_isolation: isolation,
          ...(isolation === 'process' ? { runner_max_tasks: args['runner-max-tasks'] } : {}),
          tasks: args.tasks,
          slots: args.slots,
          delay_s: args.delay,
          wall_ms: fromDbTime(run.end_date!) - fromDbTime(run.start_date!),
          slot_seconds: Number((app.worker!.slotMsSpent / 1000).toFixed(2)),
          blocking_s: (args.tasks * args.delay) / args.slots,
        };
      }
      if (Date.now() > deadline) throw new Error(`the benchmark run is still ${run.state} after the deadline`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await app.stop();
    await dispose();
    rmSync(scratch, { recursive: true, force: true });
  }
}

function dagSource(tasks: number, delay: number): string {
  return `
import { BaseOperator, Dag } from ${JSON.stringify(path.join(root, 'dist/src/index.js'))};
import { TimeDeltaTrigger } from ${JSON.stringify(path.join(root, 'dist/triggers/index.js'))};
class Wait extends BaseOperator {
  execute(): never { return this.defer({ trigger: new TimeDeltaTrigger({ delta: ${delay} }), method: 'resume' }); }
  resume() { return null; }
}
export const dag = new Dag({ dagId: 'runtime_bench' }).add(...Array.from({ length: ${tasks} }, (_, i) => new Wait({ taskId: 'wait_' + i })));
`;
}

async function prepareDatabase(target: string, scratch: string): Promise<{ url: string; dispose: () => Promise<void> }> {
  if (target === 'sqlite') return { url: `sqlite:${path.join(scratch, 'bench.db')}`, dispose: async () => {} };
  if (target.startsWith('sqlite:')) return { url: target, dispose: async () => {} };
  // PostgreSQL: a private schema, dropped afterwards.
  const schema = await createScratchSchema(target, 'bench');
  return { url: schema.url, dispose: () => schema.drop() };
}
