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
//   npm run bench:events -- [--db postgres://…] [--events 10000] [--kills 5] [--batch 100] [--redis redis://127.0.0.1:6379]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '@redis/client';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess } from '../test/support/processes.ts';
import { benchDatabase, until } from './bench-support.ts';

const args = yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'a postgres:// URL (a private schema in it) or sqlite: file; default a SQLite file in a scratch folder' })
  .option('events', { type: 'number', default: 10_000 })
  .option('kills', { type: 'number', default: 5 })
  .option('batch', { type: 'number', default: 100 })
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

try {
  for (const name of ['steady', 'kills'] as const) console.log(JSON.stringify(await trial(name)));
} finally {
  await redis.quit();
  rmSync(scratch, { recursive: true, force: true });
}
