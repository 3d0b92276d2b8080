// Failover, measured from outside: two triggerer processes (the package's bin), one running
// `--triggers` waits; the one holding them is stopped (SIGTERM) or killed (SIGKILL), and the
// figure is the time from the fault to the moment the peer runs the last of them (each trigger
// appends a line with its process id when it starts). `--trials` of each fault, each on a fresh
// database; one JSON line per fault kind. Default settings but the threshold, set to 60 s so
// that only the liveness lock (a kill) or the release (a stop) can explain a fast takeover.
//
//   npm run bench:failover -- [--db postgres://…] [--trials 10] [--triggers 200]
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { TaskDeferred } from '../src/index.ts';
import { openDatabase } from '../src/database/connect.ts';
import { migrateToLatest } from '../src/database/migrate.ts';
import { openStores } from '../src/storage/index.ts';
import { NeverTrigger, triggerStarts } from '../test/fixtures/test-triggers.ts';
import { TriggererProcess } from '../test/support/processes.ts';
import { benchDatabase, percentile } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'postgres://… (a private schema is made); default: a SQLite file' })
  .option('trials', { type: 'number', default: 10 })
  .option('triggers', { type: 'number', default: 200 })
  .strict()
  .parse();

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-failover-'));

function spawn(url: string): TriggererProcess {
  return new TriggererProcess(
    ['--db', url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--health-check-threshold', '60', '--log-level', 'info'],
    {},
    path.join(root, 'bin/triggerer.js'),
    root,
  );
}

async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

async function trial(fault: 'SIGTERM' | 'SIGKILL', n: number): Promise<{ handoverMs: number; lost: number }> {
  const { url, dispose } = await benchDatabase(args.db, mkdtempSync(path.join(scratch, `${fault}-${n}-`)));
  const database = openDatabase(url);
  const file = path.join(scratch, `${fault}-${n}.log`);
  writeFileSync(file, '');
  try {
    await migrateToLatest(database);
    const victim = spawn(url);
    await victim.waitForJob(30_000);
    const storage = openStores(database);
    for (let i = 0; i < args.triggers; i++) {
      const row = await database.db
        .insertInto('task_instance')
        .values({
          dag_id: 'bench',
          task_id: `t${i}`,
          run_id: 'r',
          state: 'running',
          priority_weight: 1,
          start_date: new Date().toISOString(),
          updated_at: new Date().toISOString(),
        })
        .returning('id')
        .executeTakeFirstOrThrow();
      await storage.taskInstances.deferTaskInstance(row.id, new TaskDeferred({ trigger: new NeverTrigger({ file, tag: `n${i}` }), method: 'resume' }));
    }
    await until(() => triggerStarts(file).size === args.triggers, 30_000, 'the victim running every trigger');
    const survivor = spawn(url);
    await survivor.waitForJob(30_000);
    const faultAt = performance.now();
    victim.kill(fault);
    let handoverMs = Number.NaN;
    try {
      await until(() => [...triggerStarts(file).values()].every((pids) => pids.includes(survivor.pid!)), 60_000, 'the survivor running every trigger');
      handoverMs = performance.now() - faultAt;
    } catch {}
    const lost = [...triggerStarts(file).values()].filter((pids) => !pids.includes(survivor.pid!)).length;
    survivor.kill('SIGKILL');
    victim.kill('SIGKILL');
    await Promise.all([survivor.exit, victim.exit]);
    return { handoverMs, lost };
  } finally {
    await database.close();
    await dispose();
    rmSync(file, { force: true });
  }
}

const dialect = args.db?.startsWith('postgres') ? 'postgres' : 'sqlite';
for (const fault of ['SIGTERM', 'SIGKILL'] as const) {
  const results = [];
  for (let n = 0; n < args.trials; n++) results.push(await trial(fault, n));
  const times = results
    .map((result) => result.handoverMs)
    .filter(Number.isFinite)
    .sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      dialect,
      fault,
      trials: args.trials,
      triggers: args.triggers,
      handover_p50_ms: Math.round(percentile(times, 0.5)),
      handover_p99_ms: Math.round(percentile(times, 0.99)),
      handover_max_ms: Math.round(times.at(-1) ?? Number.NaN),
      lost: results.reduce((sum, result) => sum + result.lost, 0),
    }),
  );
}
rmSync(scratch, { recursive: true, force: true });
