// A worker that stops answering past the zombie threshold (a long garbage-collection pause, a
// frozen VM or container, SIGSTOP) while it runs a try: the scheduler retries the try on another
// worker. When the paused worker wakes, what it still had to write of the old try (a deferral, an
// outcome) must not land on the try that replaced it. Real processes, paused with SIGSTOP.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../src/dags/dag-processor.ts';
import { triggerDagRun } from '../src/dags/manual-run.ts';
import { dropTestDatabases, testDialects } from './support/databases.ts';
import { waitFor, type TestDatabase } from './support/fixtures.ts';
import { processScratch } from './support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, stopCleanly, type TriggererProcess } from './support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const FAST = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];

/** Try 1 waits for `firstFlag`, then defers or returns; try 2 waits for `secondFlag` and returns. */
const dagSource = (firstFlag: string, secondFlag: string, firstTryEnds: 'defer' | 'return') => `
import { existsSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
const until = async (flag) => { while (!existsSync(flag)) await new Promise((resolve) => setTimeout(resolve, 20)); };
class TwoTries extends BaseOperator {
  async execute(context) {
    if (context.taskInstance.tryNumber === 1) {
      await until(${JSON.stringify(firstFlag)});
      ${firstTryEnds === 'defer' ? "return this.defer({ trigger: new TimeDeltaTrigger({ delta: 3600 }), method: 'resume' });" : "return 'first try';"}
    }
    await until(${JSON.stringify(secondFlag)});
    return 'second try';
  }
  resume() { return 'resumed from the first try'; }
}
export const dag = new Dag({ dagId: 'paused' }).add(new TwoTries({ taskId: 'work', retries: 1, retryDelay: 0 }));
`;

const tiRow = (db: TestDatabase) =>
  db.db
    .selectFrom('task_instance')
    .select(['state', 'try_number', 'worker_job_id', 'return_value', 'trigger_id'])
    .where('task_id', '=', 'work')
    .executeTakeFirstOrThrow();

/**
 * SIGSTOP, as a frozen process. On SQLite a process stopped inside a write would keep the file
 * locked and stall everyone (the very outage it would then be): should it hold the write lock, it
 * is let go on and stopped again a moment later.
 */
async function pause(proc: TriggererProcess, db: TestDatabase): Promise<void> {
  for (;;) {
    proc.kill('SIGSTOP');
    if (db.adapter.name !== 'sqlite' || writeLockFree(db)) return;
    proc.kill('SIGCONT');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function writeLockFree(db: TestDatabase): boolean {
  const probe = new BetterSqlite3(db.url.replace(/^sqlite:/, ''), { timeout: 0 });
  try {
    probe.exec('BEGIN IMMEDIATE');
    probe.exec('ROLLBACK');
    return true;
  } catch {
    return false;
  } finally {
    probe.close();
  }
}

describe.each(testDialects)('a worker paused past the zombie threshold on %s', (dialect) => {
  it.each(['defer', 'return'] as const)(
    'wakes to find its try retried elsewhere: its %s of the old try is dropped',
    async (firstTryEnds) => {
      const db = await scratch.database(dialect);
      const dags = scratch.dir('paused');
      const firstFlag = path.join(dags, 'first');
      const secondFlag = path.join(dags, 'second');
      writeFileSync(path.join(dags, 'paused.mjs'), dagSource(firstFlag, secondFlag, firstTryEnds));
      await processDagFolder(db, dags);

      const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...FAST, '--zombie-threshold', '2']);
      const paused = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST]);
      await scheduler.waitForJob(20_000);
      const pausedJob = await paused.waitForJob(20_000);
      await triggerDagRun(db, 'paused');
      await waitFor(async () => (await tiRow(db)).state === 'running', { what: 'try 1 running', timeoutMs: 20_000 });
      expect(await tiRow(db)).toMatchObject({ try_number: 1, worker_job_id: pausedJob });

      await pause(paused, db);
      try {
        await waitFor(async () => (await tiRow(db)).state === 'scheduled', { what: 'try 1 reaped and ready to retry', timeoutMs: 30_000 });
        const other = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST]);
        const otherJob = await other.waitForJob(20_000);
        await waitFor(async () => (await tiRow(db)).state === 'running', { what: 'try 2 running on the other worker', timeoutMs: 20_000 });
        expect(await tiRow(db)).toMatchObject({ try_number: 2, worker_job_id: otherJob });

        // Try 1's code ends while its worker is frozen; the worker writes that once it wakes.
        writeFileSync(firstFlag, '');
        paused.kill('SIGCONT');
        const dropped =
          firstTryEnds === 'defer' ? "deferred, but it is no longer this worker's to defer; dropped" : "but is no longer this worker's; outcome dropped";
        await paused.waitForLine((line) => String(line.msg).includes(dropped), 30_000);
        expect(await tiRow(db)).toMatchObject({ state: 'running', try_number: 2, worker_job_id: otherJob, trigger_id: null });
        expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);

        writeFileSync(secondFlag, '');
        await waitFor(async () => (await tiRow(db)).state === 'success', { what: 'try 2 finished', timeoutMs: 20_000 });
        expect(await tiRow(db)).toMatchObject({ state: 'success', try_number: 2, return_value: '"second try"' });
        await stopCleanly([paused, other, scheduler]);
      } finally {
        paused.kill('SIGCONT');
      }
    },
    120_000,
  );
});
