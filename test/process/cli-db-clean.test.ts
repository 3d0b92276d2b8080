// `deferflow db clean --older-than D [--yes]` (Airflow's db clean), as a user runs it: without
// --yes it only counts; a missing or mistyped --older-than deletes nothing; with --yes, finished
// runs older than D go with their task instances and logs, old signals but each key's latest,
// ended job rows, audit log records, daemon samples. Unfinished runs and each DAG's latest scheduled run stay, whatever their age.
import { afterAll, describe, expect, it } from 'vitest';
import { toDbTime } from '../../src/internals.ts';
import { openStores } from '../../src/storage/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { processScratch } from '../support/process-scratch.ts';
import { spawnDeferflow } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const DAY = 86_400_000;

describe.each(testDialects)('deferflow db clean on %s', (dialect) => {
  it('counts without --yes, refuses a bad --older-than, and deletes only what finished before it', async () => {
    const db = await scratch.database(dialect);
    const storage = openStores(db);
    const now = Date.now();
    const run = async (
      runId: string,
      runType: 'manual' | 'scheduled',
      state: 'success' | 'failed' | 'running',
      endedDaysAgo: number,
      logicalDaysAgo = endedDaysAgo,
    ) => {
      const at = toDbTime(now - endedDaysAgo * DAY);
      await db.db
        .insertInto('dag_run')
        .values({
          dag_id: 'etl',
          run_id: runId,
          run_type: runType,
          logical_date: toDbTime(now - logicalDaysAgo * DAY),
          state,
          conf: '{}',
          created_at: at,
          updated_at: at,
          end_date: state === 'running' ? null : at,
        })
        .execute();
      const ti = await db.db
        .insertInto('task_instance')
        .values({ dag_id: 'etl', task_id: 'load', run_id: runId, state: state === 'running' ? 'running' : state, updated_at: at })
        .returning('id')
        .executeTakeFirstOrThrow();
      await db.db
        .insertInto('task_log')
        .values({ task_instance_id: ti.id, try_number: 1, logged_at: at, level: 'info', message: `${runId} line`, fields: null })
        .execute();
    };
    await run('old_manual', 'manual', 'failed', 40);
    await run('old_scheduled', 'scheduled', 'success', 40, 41);
    await run('latest_scheduled', 'scheduled', 'success', 35, 36); // old, but the latest scheduled: kept
    await run('recent', 'manual', 'success', 1);
    await run('old_running', 'manual', 'running', 40, 42); // unfinished: kept
    for (let i = 0; i < 3; i++) await storage.signals.sendSignal('orders', String(i), now - 40 * DAY);
    await storage.signals.sendSignal('orders', '3', now);
    const ended = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 1 });
    await db.db
      .updateTable('job')
      .set({ state: 'success', end_date: toDbTime(now - 40 * DAY) })
      .where('id', '=', ended)
      .execute();
    const live = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 2, capacity: 1 });
    await storage.logs.appendTriggerLogLines([
      { triggerId: 1, loggedAt: now - 40 * DAY, level: 'info', message: 'old trigger line', fieldsJson: null },
      { triggerId: 2, loggedAt: now - 1 * DAY, level: 'info', message: 'recent trigger line', fieldsJson: null },
    ]);

    const audit = (outcome: string, daysAgo: number) =>
      storage.audit.appendAuditEntry({ actor: 'alice', source: 'cli', address: 'h', action: 'pause', dagId: 'etl', outcome }, now - daysAgo * DAY);
    await audit('old action', 40);
    await audit('recent action', 1);
    for (const daysAgo of [40, 1])
      await storage.jobs.recordDaemonSample({ jobId: live, jobType: 'WorkerJob', figures: { slots_used: daysAgo } }, now - daysAgo * DAY);

    const snapshot = async () => ({
      runs: (await db.db.selectFrom('dag_run').select('run_id').orderBy('run_id').execute()).map((row) => row.run_id),
      tis: (await db.db.selectFrom('task_instance').select('run_id').orderBy('run_id').execute()).map((row) => row.run_id),
      logs: (await db.db.selectFrom('task_log').select('message').orderBy('message').execute()).map((row) => row.message),
      triggerLogs: (await db.db.selectFrom('trigger_log').select('message').orderBy('message').execute()).map((row) => row.message),
      signals: (await db.db.selectFrom('signal').select('version').orderBy('version').execute()).map((row) => Number(row.version)),
      jobs: (await db.db.selectFrom('job').select('id').orderBy('id').execute()).map((row) => row.id),
      audit: (await db.db.selectFrom('audit_log').select('outcome').orderBy('id').execute()).map((row) => row.outcome),
      samples: (await db.db.selectFrom('daemon_sample').select('figures').orderBy('id').execute()).map((row) => row.figures),
      // Each task instance's state history (one row: it was made), by its run; null: left behind.
      history: (
        await db.db
          .selectFrom('task_instance_history')
          .leftJoin('task_instance', 'task_instance.id', 'task_instance_history.task_instance_id')
          .select('task_instance.run_id')
          .orderBy('task_instance.run_id')
          .execute()
      ).map((row) => row.run_id),
    });
    const before = await snapshot();
    const clean = async (...args: string[]) => {
      const proc = spawnDeferflow(['db', 'clean', '--db', db.url, ...args]);
      const exit = await proc.exit;
      return { code: exit.code, out: proc.text.join('\n'), err: proc.stderr.join('\n') };
    };

    const counted = await clean('--older-than', '30d');
    expect(counted.code).toBe(0);
    expect(counted.out).toMatch(
      /^would delete 2 finished DAG run\(s\) with 2 task instance\(s\), \d+ task log line\(s\), 1 trigger log line\(s\), 3 signal\(s\), 1 ended job row\(s\), 1 audit log record\(s\), 1 daemon sample\(s\) from before \S+; nothing deleted \(pass --yes to delete\)$/,
    );
    expect(await snapshot()).toEqual(before);
    for (const bad of [['--older-than', '30x', '--yes'], ['--yes'], ['--older-than', '-5', '--yes']]) {
      const refused = await clean(...bad);
      expect(refused.code, bad.join(' ')).not.toBe(0);
      expect(refused.err, bad.join(' ')).toMatch(/older-than/);
    }
    expect(await snapshot()).toEqual(before);

    const deleted = await clean('--older-than', '30d', '--yes');
    expect(deleted.code).toBe(0);
    expect(deleted.out).toMatch(/^deleted 2 finished DAG run\(s\) with 2 task instance\(s\), /);
    expect(await snapshot()).toEqual({
      runs: ['latest_scheduled', 'old_running', 'recent'],
      tis: ['latest_scheduled', 'old_running', 'recent'],
      // Lines older than 30 days go even where their task instance stays.
      logs: ['recent line'],
      triggerLogs: ['recent trigger line'],
      signals: [4],
      jobs: [live],
      audit: ['recent action'],
      samples: ['{"slots_used":1}'],
      history: ['latest_scheduled', 'old_running', 'recent'],
    });
  }, 60_000);
});
