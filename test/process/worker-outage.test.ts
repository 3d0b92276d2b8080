// A worker whose database goes away just as its task finishes: the outcome is kept and written
// once the database is back (retried with backoff while the worker runs), not dropped with the
// task left running until the worker stops. PostgreSQL cut off by a proxy; SQLite locked by
// another process for longer than its busy timeout.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { dropTestDatabases } from '../support/databases.ts';
import { waitFor, type TestDatabase } from '../support/fixtures.ts';
import { postgresProxy } from '../support/postgres-proxy.ts';
import { processScratch } from '../support/process-scratch.ts';
import { whileLocked } from '../support/sqlite-lock.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, stopCleanly, type TriggererProcess } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const dagSource = (flag: string) => `
import { existsSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class UntilFlag extends BaseOperator {
  async execute() { while (!existsSync(${JSON.stringify(flag)})) await new Promise((resolve) => setTimeout(resolve, 20)); return 'done'; }
}
export const dag = new Dag({ dagId: 'outage' }).add(new UntilFlag({ taskId: 'finish_during_outage' }));
`;

async function setUp(db: TestDatabase) {
  const dags = scratch.dir('outage');
  const flag = path.join(dags, 'flag');
  writeFileSync(path.join(dags, 'outage.mjs'), dagSource(flag));
  await processDagFolder(db, dags);
  return { dags, flag };
}

const tiRow = (db: TestDatabase) =>
  db.db.selectFrom('task_instance').select(['state', 'try_number', 'return_value']).where('task_id', '=', 'finish_during_outage').executeTakeFirstOrThrow();

const FAST = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];

/**
 * A scheduler on `db` and a worker on `workerUrl` (the database, or a proxy in front of it),
 * started, with the outage DAG's one task running on the worker.
 */
async function taskRunning(db: TestDatabase, dags: string, workerUrl = db.url) {
  const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...FAST]);
  const worker = spawnDeferflow(['worker', '--db', workerUrl, '--dags', dags, ...FAST]);
  await scheduler.waitForJob(20_000);
  await worker.waitForJob(20_000);
  await triggerDagRun(db, 'outage');
  await waitFor(async () => (await tiRow(db)).state === 'running', { what: 'the task running', timeoutMs: 20_000 });
  return { scheduler, worker };
}

/** Waits for the worker to log a failed write containing `text`; on SQLite the lock must first outlast the 5 s busy timeout, so a margin for a loaded machine. */
function failedWriteLogged(worker: TriggererProcess, text: string, what: string) {
  return waitFor(() => worker.lines.some((line) => String(line.msg).includes(text)), { what, timeoutMs: 60_000 });
}

describe('a worker losing its database as a task finishes', () => {
  it('on postgres: writes the outcome once the database answers again', async () => {
    const db = await scratch.database('postgres');
    const { dags, flag } = await setUp(db);
    const proxy = await postgresProxy(db.url);
    try {
      const { scheduler, worker } = await taskRunning(db, dags, proxy.url);
      // The cut ends the worker's sessions, its liveness lock's too: a scheduler would judge it
      // dead within a second and retry or fail its try (as it should: runtime-processes.test.ts),
      // and the late outcome would then rightly not land. What is tested here is the worker's
      // side, so nothing judges it during the outage.
      await stopCleanly([scheduler]);

      await proxy.cut();
      writeFileSync(flag, '');
      await failedWriteLogged(worker, 'failed; retrying with backoff while the worker runs', 'the failed write reported');
      expect((await tiRow(db)).state).toBe('running');
      await proxy.restore();
      await waitFor(async () => (await tiRow(db)).state === 'success', { what: 'the outcome written after the outage', timeoutMs: 30_000 });
      expect(await tiRow(db)).toMatchObject({ state: 'success', try_number: 1, return_value: '"done"' });
      expect(worker.exited).toBeNull();
      await stopCleanly([worker]);
    } finally {
      proxy.close();
    }
  }, 150_000);

  it('on sqlite: waits out another process holding the database locked past its busy timeout', async () => {
    const db = await scratch.database('sqlite');
    const { dags, flag } = await setUp(db);
    const { scheduler, worker } = await taskRunning(db, dags);

    await whileLocked(db, async () => {
      writeFileSync(flag, '');
      await failedWriteLogged(worker, 'failed; retrying with backoff while the worker runs', 'the failed write reported');
    });
    await waitFor(async () => (await tiRow(db)).state === 'success', { what: 'the outcome written after the lock', timeoutMs: 30_000 });
    expect(await tiRow(db)).toMatchObject({ state: 'success', try_number: 1, return_value: '"done"' });
    expect(worker.exited).toBeNull();
    expect(scheduler.exited).toBeNull();
    await stopCleanly([worker, scheduler]);
  }, 150_000);

  it('on sqlite: a deferral written during the lock is kept and written after it, not failed for the outage', async () => {
    const db = await scratch.database('sqlite');
    const dags = scratch.dir('outage-defer');
    const flag = path.join(dags, 'flag');
    writeFileSync(
      path.join(dags, 'outage.mjs'),
      `
import { existsSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class DeferOnFlag extends BaseOperator {
  async execute() {
    while (!existsSync(${JSON.stringify(flag)})) await new Promise((resolve) => setTimeout(resolve, 20));
    return this.defer({ trigger: new TimeDeltaTrigger({ delta: 3600 }), method: 'resume' });
  }
  resume() { return 'resumed'; }
}
export const dag = new Dag({ dagId: 'outage' }).add(new DeferOnFlag({ taskId: 'finish_during_outage', retries: 0 }));
`,
    );
    await processDagFolder(db, dags);
    const { scheduler, worker } = await taskRunning(db, dags);

    await whileLocked(db, async () => {
      writeFileSync(flag, '');
      await failedWriteLogged(worker, 'recording its deferral of task instance', 'the failed deferral write reported');
    });
    await waitFor(async () => (await tiRow(db)).state === 'deferred', { what: 'the deferral written after the lock', timeoutMs: 30_000 });
    expect(await tiRow(db)).toMatchObject({ state: 'deferred', try_number: 1 });
    expect(await db.db.selectFrom('trigger').select('classpath').execute()).toHaveLength(1);
    expect(worker.exited).toBeNull();
    await stopCleanly([worker, scheduler]);
  }, 150_000);

  it('on sqlite: runs what a claim whose answer was lost queued for it, once its next claim goes through', async () => {
    const db = await scratch.database('sqlite');
    const { dags, flag } = await setUp(db);
    writeFileSync(flag, '');
    // No scheduler: only the worker moves the task instance, and only if it takes it up.
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST]);
    const jobId = await worker.waitForJob(20_000);
    await triggerDagRun(db, 'outage');
    await whileLocked(db, async (locker) => {
      // What the claim committed while the worker waited on the lock and gave up: queued for it.
      locker
        .prepare("update task_instance set state = 'queued', worker_job_id = ?, queued_at = ?, updated_at = ? where task_id = 'finish_during_outage'")
        .run(jobId, new Date().toISOString(), new Date().toISOString());
      await waitFor(() => worker.lines.some((line) => String(line.msg).includes('claiming task instances failed')), {
        what: 'a failed claim',
        // The lock must be held for the 5 s busy timeout before any statement fails; a margin
        // beyond that for a loaded machine.
        timeoutMs: 60_000,
      });
    });
    await waitFor(async () => (await tiRow(db)).state === 'success', { what: 'the lost claim taken up and run', timeoutMs: 30_000 });
    expect(await tiRow(db)).toMatchObject({ state: 'success', try_number: 1, return_value: '"done"' });
    expect(worker.lines.some((line) => String(line.msg).includes('a claim whose answer was lost queued for this worker'))).toBe(true);
    await stopCleanly([worker]);
  }, 150_000);
});
