// Push wake-ups, through real processes: with every daemon polling only every 30 s, a DAG run
// whose task defers and resumes still goes worker → triggerer → worker → scheduler in about a
// second, because each write NOTIFYs the daemons it gives work to (PostgreSQL), or each daemon
// watches the SQLite file for other processes' commits.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../../src/services/dags/dag-processor.ts';
import { fromDbTime } from '../../../src/internals.ts';
import { triggerDagRun } from '../../../src/services/dags/manual-run.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAG = `import { BaseOperator, Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Nap extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.2 }), method: 'done' }); }
  done() { return 'rested'; }
}
const dag = new Dag({ dagId: 'pushed' });
const first = new FunctionOperator({ taskId: 'first', fn: () => 1 });
const nap = new Nap({ taskId: 'nap' });
const last = new FunctionOperator({ taskId: 'last', fn: () => 3 });
dag.add(first, nap, last);
first.before(nap).before(last);
export { dag };
`;

const started = (proc: TriggererProcess) => proc.waitForJob(20_000);

const TIMED = `import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { DateTimeTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class FailsOnce extends BaseOperator {
  execute(context) { if (context.taskInstance.tryNumber === 1) throw new Error('first try fails'); return 'second try'; }
}
class NeverFires extends BaseOperator {
  execute() { return this.defer({ trigger: new DateTimeTrigger({ moment: '2100-01-01T00:00:00Z' }), method: 'done', timeout: 1 }); }
  done() { return 'fired'; }
}
export const dag = new Dag({ dagId: 'timed' }).add(new FailsOnce({ taskId: 'retried', retries: 1, retryDelay: 1 }), new NeverFires({ taskId: 'timed_out' }));
`;

describe('push wake-ups', () => {
  it('with pushes working on postgres, polls slow down, yet retries and deferral timeouts still come due on time', async () => {
    const db = await scratch.database('postgres');
    const dags = scratch.dir('push-timed');
    writeFileSync(path.join(dags, 'timed.mjs'), TIMED);
    await processDagFolder(db, dags);
    // A 1 s poll: 20 s apart while pushes work.
    const procs = [
      spawnDeferflow(['scheduler', '--db', db.url, '--poll-interval', '1']),
      spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--poll-interval', '1']),
      spawnTriggerer(['--db', db.url, '--poll-interval', '1']),
    ];
    for (const proc of procs) await started(proc);
    // Past the LISTEN probe (it takes milliseconds), so the daemons poll every 20 s.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const runId = await triggerDagRun(db, 'timed');
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state === 'failed', {
      what: 'the run done',
      timeoutMs: 25_000,
    });
    const tis = await db.db.selectFrom('task_instance').select(['task_id', 'state', 'try_number', 'start_date', 'end_date', 'return_value']).execute();
    const retried = tis.find((ti) => ti.task_id === 'retried')!;
    const timedOut = tis.find((ti) => ti.task_id === 'timed_out')!;
    expect([retried.state, retried.try_number, JSON.parse(retried.return_value!)]).toEqual(['success', 2, 'second try']);
    expect(timedOut.state).toBe('failed');
    // Each came due by time alone, a second after it began; far inside the 20 s safety-net polls.
    const runStart = fromDbTime((await db.db.selectFrom('dag_run').select('start_date').where('run_id', '=', runId).executeTakeFirstOrThrow()).start_date!);
    expect(fromDbTime(retried.end_date!) - runStart).toBeLessThan(7_000);
    expect(fromDbTime(timedOut.end_date!) - runStart).toBeLessThan(7_000);
    await stopCleanly(procs);
  }, 60_000);

  it.each(testDialects)(
    'carry a run through every daemon far faster than their 30 s polls, on %s',
    async (dialect) => {
      const db = await scratch.database(dialect);
      const dags = scratch.dir('push-wakeups');
      writeFileSync(path.join(dags, 'pushed.mjs'), DAG);
      await processDagFolder(db, dags);
      const slow = ['--poll-interval', '30', '--heartbeat-interval', '1'];
      const procs = [
        spawnDeferflow(['scheduler', '--db', db.url, ...slow]),
        spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...slow]),
        spawnTriggerer(['--db', db.url, ...slow]),
      ];
      for (const proc of procs) await started(proc);
      // Each daemon's first pass is behind it: from here on only pushes move the run quickly.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const startedAt = Date.now();
      const runId = await triggerDagRun(db, 'pushed');
      await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state === 'success', {
        what: 'the run done',
        timeoutMs: 25_000,
      });
      // Seven hops (run created, three tasks scheduled and run, a deferral, its event, the run's end),
      // each a 30 s poll away without pushes.
      expect(Date.now() - startedAt).toBeLessThan(15_000);
      const stopping = [...procs];
      if (dialect === 'postgres') {
        // One LISTEN session per process; none for a triggerer told --no-push.
        const quiet = spawnTriggerer(['--db', db.url, '--no-push', ...slow]);
        stopping.push(quiet);
        await started(quiet);
        const sessions = async (pid: number) =>
          (await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where application_name = ${`deferflow listen ${pid}`}`.execute(db.db))
            .rows[0]!.n;
        for (const proc of procs) expect(await sessions(proc.pid)).toBe(1);
        expect(await sessions(quiet.pid)).toBe(0);
      }
      await stopCleanly(stopping);
    },
    60_000,
  );
});
