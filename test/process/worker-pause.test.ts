// A worker that stops answering past the zombie threshold (a long garbage-collection pause, a
// frozen VM or container, SIGSTOP) while it runs a try: the scheduler retries the try on another
// worker. When the paused worker wakes, what it still had to write of the old try (a deferral, an
// outcome) must not land on the try that replaced it. Real processes, paused with SIGSTOP.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor, type TestDatabase } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { freeze, PACKAGE_ENTRY, PACKAGE_TRIGGERS, RUNNER_PROCESSES, spawnDeferflow, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const FAST = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];

type FirstTryEnds = 'defer' | 'return' | 'never';

const FIRST_TRY_ENDS: Record<FirstTryEnds, string> = {
  defer: "return this.defer({ trigger: new TimeDeltaTrigger({ delta: 3600 }), method: 'resume' });",
  return: "return 'first try';",
  never: 'await new Promise(() => {});',
};

/** Try 1 waits for `firstFlag`, then defers or returns (or waits for ever); try 2 waits for `secondFlag` and returns. */
const dagSource = (firstFlag: string, secondFlag: string, firstTryEnds: FirstTryEnds) => `
import { existsSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
const until = async (flag) => { while (!existsSync(flag)) await new Promise((resolve) => setTimeout(resolve, 20)); };
class TwoTries extends BaseOperator {
  async execute(context) {
    if (context.taskInstance.tryNumber === 1) {
      await until(${JSON.stringify(firstFlag)});
      ${FIRST_TRY_ENDS[firstTryEnds]}
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

describe.each(testDialects)('a worker paused past the zombie threshold on %s', (dialect) => {
  it.each(['defer', 'return', 'never'] as const)(
    'wakes to find its try retried elsewhere (try 1 then ends: %s): nothing of the old try lands',
    async (firstTryEnds) => {
      const db = await scratch.database(dialect);
      const dags = scratch.dir('paused');
      const firstFlag = path.join(dags, 'first');
      const secondFlag = path.join(dags, 'second');
      writeFileSync(path.join(dags, 'paused.mjs'), dagSource(firstFlag, secondFlag, firstTryEnds));
      await processDagFolder(db, dags);

      const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...FAST, '--zombie-threshold', '2']);
      // A try that never ends runs in a runner process, which the worker stops once it finds the try taken over.
      const paused = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST], firstTryEnds === 'never' ? RUNNER_PROCESSES : {});
      await scheduler.waitForJob(20_000);
      const pausedJob = await paused.waitForJob(20_000);
      await triggerDagRun(db, 'paused');
      await waitFor(async () => (await tiRow(db)).state === 'running', { what: 'try 1 running', timeoutMs: 20_000 });
      expect(await tiRow(db)).toMatchObject({ try_number: 1, worker_job_id: pausedJob });

      await freeze(paused, db.url);
      try {
        await waitFor(async () => (await tiRow(db)).state === 'scheduled', { what: 'try 1 reaped and ready to retry', timeoutMs: 30_000 });
        const other = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST]);
        const otherJob = await other.waitForJob(20_000);
        await waitFor(async () => (await tiRow(db)).state === 'running', { what: 'try 2 running on the other worker', timeoutMs: 20_000 });
        expect(await tiRow(db)).toMatchObject({ try_number: 2, worker_job_id: otherJob });

        // Try 1's code ends while its worker is frozen. Once the worker wakes, either its first
        // heartbeat finds the try taken over and stops the code, or the code's end comes first
        // and the worker's write of it is refused: both are logged, and neither lands.
        writeFileSync(firstFlag, '');
        paused.kill('SIGCONT');
        const refused =
          firstTryEnds === 'defer' ? "deferred, but it is no longer this worker's to defer; dropped" : "but is no longer this worker's; outcome dropped";
        const said = await paused.waitForLine((line) => line.code === 'DF_TRY_TAKEN_OVER' || String(line.msg).includes(refused), 30_000);
        if (firstTryEnds === 'never') {
          expect(said).toMatchObject({ code: 'DF_TRY_TAKEN_OVER', try_number: 1 });
          expect(String(said.msg)).toContain(`try 1, is no longer this worker's (it is running, try 2, on worker ${otherJob})`);
        }
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
