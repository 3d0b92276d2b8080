// Push wake-ups on PostgreSQL, through real processes: with every daemon polling only every 30 s,
// a DAG run whose task defers and resumes still goes worker → triggerer → worker → scheduler in
// about a second, because each write NOTIFYs the daemons it gives work to.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/dags/dag-processor.ts';
import { triggerDagRun } from '../../src/dags/manual-run.ts';
import { dropTestDatabases } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

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

const started = (proc: TriggererProcess) => proc.waitForLine((line) => typeof line.job_id === 'number', 20_000);

describe('push wake-ups on postgres', () => {
  it('carry a run through every daemon far faster than their 30 s polls', async () => {
    const db = await scratch.database('postgres');
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
    // One LISTEN session per process; none for a triggerer told --no-push.
    const quiet = spawnTriggerer(['--db', db.url, '--no-push', ...slow]);
    await started(quiet);
    const sessions = async (pid: number) =>
      (await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where application_name = ${`deferflow listen ${pid}`}`.execute(db.db)).rows[0]!
        .n;
    for (const proc of procs) expect(await sessions(proc.pid)).toBe(1);
    expect(await sessions(quiet.pid)).toBe(0);
    for (const proc of [...procs, quiet]) proc.kill('SIGTERM');
    for (const proc of [...procs, quiet]) expect((await proc.exit).code).toBe(0);
  }, 60_000);
});
