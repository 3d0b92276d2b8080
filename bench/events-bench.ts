// Watchers measured from outside: a triggerer process (the package's bin) runs the watcher of one
// DAG scheduled on a Redis stream (RedisStreamTrigger, consumer group, batches of `--batch`), and
// `--events` messages are added to the stream at once. Two trials per database, one JSON line each:
//
//   trial 'steady'  the triggerer runs throughout: first message added → last run committed
//   trial 'kills'   the triggerer is SIGKILLed `--kills` times at random points while the runs are
//                   made, and started again each time (what exactly-once costs)
//
//   fields: events, runs (must equal events), duplicates (run ids made twice: must be 0),
//           elapsed_ms, runs_per_s
//
//   trial 'waits'   --waits tasks deferred on one stream, each waiting for the message about its own
//                   order (RedisStreamTrigger, distinct `match`), run by one triggerer process, and
//                   a worker process (default options: task code in runner processes) to resume
//                   them; then --samples messages added one at a time, each for a random waiting
//                   task (the first ten warm the worker's runner up and are not counted)
//
//   fields: waits, readers (the triggerer's connections blocked reading the stream: must be 1),
//           connections (all its Redis connections), rss_per_wait_bytes (RSS with every wait
//           running, less RSS idle, per wait), message_to_resumed_p50_ms / p99 / max (XADD → the
//           task's resume method starts in the runner process, on the wall clock both share)
//
//   npm run bench:events -- [--trials steady,kills,waits] [--db postgres://…] [--events 10000] [--kills 5] [--batch 100] [--waits 10000] [--samples 500] [--redis redis://127.0.0.1:6379]
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '@redis/client';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { toDbTime } from '../src/database/schema.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess } from '../test/support/processes.ts';
import { RedisStreamTrigger } from '../triggers/index.ts';
import { benchDatabase, insertDeferrals, percentile, until } from './bench-support.ts';

const args = yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'a postgres:// URL (a private schema in it) or sqlite: file; default a SQLite file in a scratch folder' })
  .option('events', { type: 'number', default: 10_000 })
  .option('kills', { type: 'number', default: 5 })
  .option('batch', { type: 'number', default: 100 })
  .option('trials', { type: 'string', default: 'steady,kills,waits', describe: 'which trials to run, comma-separated' })
  .option('waits', { type: 'number', default: 10_000, describe: "the 'waits' trial's tasks waiting on one stream" })
  .option('samples', { type: 'number', default: 500, describe: "the 'waits' trial's messages timed" })
  .option('redis', { type: 'string', default: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' })
  .strict()
  .parseSync();

const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-events-bench-'));
const redis = createClient({ url: args.redis });
await redis.connect();

async function trial(name: 'steady' | 'kills'): Promise<Record<string, unknown>> {
  const { url, dispose } = await benchDatabase(args.db, scratch, `events-${name}`);
  const database = openDatabase(url);
  const stream = `deferflow-bench-${process.pid}-${name}`;
  try {
    await migrateToLatest(database);
    const dags = path.join(scratch, `dags-${name}`);
    mkdirSync(dags, { recursive: true });
    writeFileSync(
      path.join(dags, 'orders.mts'),
      `import { Dag, BaseOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
import { RedisStreamTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Noop extends BaseOperator { execute() { return null; } }
export const dag = new Dag({ dagId: 'orders', schedule: { watch: new RedisStreamTrigger({ connection: 'events', stream: ${JSON.stringify(stream)}, batch: ${args.batch}, block: 1 }) } }).add(new Noop({ taskId: 'noop' }));
`,
    );
    const serialized = spawnDeferflow(['dags', 'reserialize', '--db', url, '--dags', dags]);
    const exit = await serialized.exitWithin(60_000);
    if (exit.code !== 0) throw new Error(`dags reserialize failed: ${serialized.describe()}`);
    const env = { DEFERFLOW_CONN_EVENTS: args.redis };
    const start = () => spawnTriggerer(['--db', url, '--poll-interval', '0.2'], env);
    let triggerer: TriggererProcess = start();
    // The consumer group exists once the watcher runs: messages from then on are its.
    await until(async () => (await redis.exists(stream)) === 1, { timeoutMs: 60_000, what: 'the watcher consuming', intervalMs: 50 });
    const runs = async () =>
      Number(
        (
          await database.db
            .selectFrom('dag_run')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    const began = Date.now();
    for (let from = 0; from < args.events; from += 1000) {
      const pipeline = redis.multi();
      for (let i = from; i < Math.min(args.events, from + 1000); i++) pipeline.xAdd(stream, '*', { n: String(i) });
      await pipeline.exec();
    }
    if (name === 'kills') {
      for (let kill = 0; kill < args.kills; kill++) {
        const target = Math.floor(((kill + Math.random()) / args.kills) * args.events * 0.9);
        await until(async () => (await runs()) >= target, { timeoutMs: 300_000, what: `runs past ${target}`, intervalMs: 20 });
        triggerer.kill('SIGKILL');
        await triggerer.exit;
        triggerer = start();
      }
    }
    await until(async () => (await runs()) >= args.events, { timeoutMs: 600_000, what: `${args.events} runs`, intervalMs: 20 });
    const elapsedMs = Date.now() - began;
    triggerer.kill('SIGTERM');
    await triggerer.exit;
    const ids = await database.db.selectFrom('dag_run').select('run_id').execute();
    const made = ids.length;
    return {
      trial: name,
      dialect: url.startsWith('postgres') ? 'postgres' : 'sqlite',
      events: args.events,
      runs: made,
      duplicates: made - new Set(ids.map((row) => row.run_id)).size,
      ...(name === 'kills' ? { kills: args.kills } : {}),
      elapsed_ms: elapsedMs,
      runs_per_s: Math.round((made / elapsedMs) * 1000),
    };
  } finally {
    await redis.del(stream);
    await database.close();
    await dispose();
  }
}

/** A process's resident set (VmRSS), in bytes. */
function rssOf(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) * 1024;
}

async function waitsTrial(): Promise<Record<string, unknown>> {
  const { url, dispose } = await benchDatabase(args.db, scratch, 'events-waits');
  const database = openDatabase(url);
  const stream = `deferflow-bench-${process.pid}-waits`;
  let triggerer: TriggererProcess | null = null;
  let worker: TriggererProcess | null = null;
  try {
    await migrateToLatest(database);
    // The DAG the deferred tasks belong to: each task's resume method records when it started.
    const dags = path.join(scratch, 'dags-waits');
    const resumedLog = path.join(scratch, 'resumed.log');
    mkdirSync(dags, { recursive: true });
    writeFileSync(
      path.join(dags, 'bench.mts'),
      `import { appendFileSync } from 'node:fs';
import { Dag, BaseOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
class Wait extends BaseOperator {
  execute(): never { throw new Error('the bench inserts these task instances deferred'); }
  resume() { appendFileSync(${JSON.stringify(resumedLog)}, this.taskId + ' ' + (performance.timeOrigin + performance.now()) + '\\n'); }
}
export const dag = new Dag({ dagId: 'bench' });
for (let i = 0; i < ${args.waits}; i++) dag.add(new Wait({ taskId: 'wait_' + i }));
`,
    );
    const serialized = spawnDeferflow(['dags', 'reserialize', '--db', url, '--dags', dags]);
    if ((await serialized.exitWithin(120_000)).code !== 0) throw new Error(`dags reserialize failed: ${serialized.describe()}`);
    const created = toDbTime(Date.now());
    await database.db
      .insertInto('dag_run')
      .values({
        dag_id: 'bench',
        run_id: 'bench__1',
        run_type: 'manual',
        logical_date: created,
        state: 'running',
        conf: '{}',
        created_at: created,
        start_date: created,
        updated_at: created,
      })
      .execute();
    triggerer = spawnTriggerer(['--db', url, '--capacity', String(args.waits + 100)], { DEFERFLOW_CONN_EVENTS: args.redis });
    worker = spawnDeferflow(['worker', '--db', url, '--dags', dags]);
    await triggerer.waitForJob(60_000);
    await worker.waitForJob(60_000);
    const pid = triggerer.child.pid!;
    const waitFor = (i: number) => {
      const { classpath, kwargs } = new RedisStreamTrigger({ connection: 'events', stream, jsonField: 'data', match: { order: i } }).serialize();
      return { classpath, kwargs: JSON.stringify(kwargs) };
    };
    const owned = async () =>
      Number(
        (
          await database.db
            .selectFrom('trigger')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('triggerer_id', 'is not', null)
            .executeTakeFirstOrThrow()
        ).n,
      );
    const clients = async () =>
      String(await redis.sendCommand(['CLIENT', 'LIST']))
        .split('\n')
        .filter((line) => line.includes(`name=deferflow-upstream-${pid} `));
    // A first hundred loads the client library and opens the reader: the RSS per wait is what the rest add.
    const first = Math.min(100, args.waits - 1);
    await insertDeferrals(database, first, waitFor);
    await until(async () => (await owned()) === first, { timeoutMs: 60_000, what: `${first} waits claimed`, intervalMs: 50 });
    await until(async () => (await clients()).some((line) => / cmd=xread /.test(line)), { timeoutMs: 60_000, what: 'the shared reader', intervalMs: 50 });
    const startedRss = rssOf(pid);
    await insertDeferrals(database, args.waits - first, waitFor, '{}', first);
    await until(async () => (await owned()) === args.waits, { timeoutMs: 300_000, what: `${args.waits} waits claimed`, intervalMs: 100 });
    const loadedRss = rssOf(pid);
    const connections = await clients();
    const resumedAt = (): Map<string, number> =>
      new Map(
        (existsSync(resumedLog) ? readFileSync(resumedLog, 'utf8') : '')
          .split('\n')
          .filter(Boolean)
          .map((line) => line.split(' ') as [string, string])
          .map(([task, at]) => [task, Number(at)]),
      );
    const warmUp = 10;
    const latencies: number[] = [];
    const order = Array.from({ length: args.waits }, (_, i) => i).sort(() => Math.random() - 0.5);
    for (const [n, i] of order.slice(0, Math.min(args.samples + warmUp, args.waits)).entries()) {
      const sent = performance.timeOrigin + performance.now();
      await redis.xAdd(stream, '*', { data: JSON.stringify({ order: i }) });
      await until(() => resumedAt().has(`wait_${i}`), { timeoutMs: 30_000, what: `wait_${i} resumed`, intervalMs: 1 });
      if (n >= warmUp) latencies.push(resumedAt().get(`wait_${i}`)! - sent);
    }
    latencies.sort((a, b) => a - b);
    return {
      trial: 'waits',
      dialect: url.startsWith('postgres') ? 'postgres' : 'sqlite',
      waits: args.waits,
      readers: connections.filter((line) => / cmd=xread /.test(line)).length,
      connections: connections.length,
      rss_per_wait_bytes: Math.round((loadedRss - startedRss) / (args.waits - first)),
      rss_mb: Math.round(loadedRss / 2 ** 20),
      samples: latencies.length,
      message_to_resumed_p50_ms: Number(percentile(latencies, 0.5).toFixed(1)),
      message_to_resumed_p99_ms: Number(percentile(latencies, 0.99).toFixed(1)),
      message_to_resumed_max_ms: Number(latencies.at(-1)!.toFixed(1)),
    };
  } finally {
    for (const daemon of [triggerer, worker]) daemon?.kill('SIGTERM');
    for (const daemon of [triggerer, worker]) await daemon?.exit;
    await redis.del(stream);
    await database.close();
    await dispose();
  }
}

try {
  const trials = args.trials.split(',').map((name) => name.trim());
  for (const name of ['steady', 'kills'] as const) if (trials.includes(name)) console.log(JSON.stringify(await trial(name)));
  if (trials.includes('waits')) console.log(JSON.stringify(await waitsTrial()));
} finally {
  await redis.quit();
  rmSync(scratch, { recursive: true, force: true });
}
