// DAGs scheduled on a signal key, as users run them: two `deferflow scheduler` processes and a
// worker on one database, signals sent from a shell; one run per version, none twice, and the
// versions sent while no scheduler ran caught up.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Dag, sendSignal } from '../../../src/index.ts';
import { processDagFolder } from '../../../src/services/dags/dag-processor.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { PACKAGE_ENTRY, spawnDeferflow, type TriggererProcess, stopCleanly } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAG = `import { Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
export const dag = new Dag({ dagId: 'on_orders', schedule: { signal: 'orders.loaded' }, startDate: '2020-01-01T00:00:00Z' }).add(
  new FunctionOperator({ taskId: 'report', fn: (context) => ({ version: context.dagRun.conf.signal.version, rows: context.dagRun.conf.signal.value.rows }) }),
);
`;

const started = (proc: TriggererProcess) => proc.waitForJob(20_000);

describe.each(testDialects)('DAGs scheduled on a signal, on %s', (dialect) => {
  it('two schedulers make one run per version, each carrying its signal; versions sent while none ran are caught up', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-schedule');
    writeFileSync(path.join(dags, 'on_orders.mjs'), DAG);
    await processDagFolder(db, dags);
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '0.5'];
    const schedulers = [0, 1].map(() => spawnDeferflow(['scheduler', '--db', db.url, ...fast]));
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '4', ...fast]);
    for (const proc of [...schedulers, worker]) await started(proc);

    const runs = async () =>
      (await db.db.selectFrom('dag_run').select(['run_id', 'state', 'conf']).where('dag_id', '=', 'on_orders').orderBy('logical_date').execute()).map(
        (run) => ({ runId: run.run_id, state: run.state, version: JSON.parse(run.conf).signal.version as number }),
      );
    for (let rows = 1; rows <= 5; rows++) await sendSignal(db, 'orders.loaded', { rows });
    await waitFor(async () => (await runs()).filter((run) => run.state === 'success').length === 5, { what: 'five runs done', timeoutMs: 30_000 });

    await stopCleanly(schedulers);
    // Sent while no scheduler runs.
    for (let rows = 6; rows <= 7; rows++) await sendSignal(db, 'orders.loaded', { rows });
    const again = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    await started(again);
    await waitFor(async () => (await runs()).filter((run) => run.state === 'success').length === 7, { what: 'the two missed versions run', timeoutMs: 30_000 });

    const all = await runs();
    expect(all.map((run) => run.runId)).toEqual([1, 2, 3, 4, 5, 6, 7].map((version) => `signal__${version}`));
    expect(all.map((run) => run.version)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    const returned = await db.db.selectFrom('task_instance').select(['run_id', 'return_value']).where('dag_id', '=', 'on_orders').orderBy('run_id').execute();
    expect(returned.map((ti) => JSON.parse(ti.return_value!))).toEqual([1, 2, 3, 4, 5, 6, 7].map((version) => ({ version, rows: version })));
    const listed = spawnDeferflow(['dags', 'list', '--db', db.url]);
    expect((await listed.exit).code).toBe(0);
    expect(listed.text[1]).toMatch(/^on_orders +on signal orders\.loaded +/);
    await stopCleanly([again, worker]);
  }, 90_000);
});

const NO_START = `import { Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
export const dag = new Dag({ dagId: 'from_now', schedule: { signal: 'events.new' } }).add(
  new FunctionOperator({ taskId: 'take', fn: (context) => context.dagRun.conf.signal.version }),
);
`;

describe.each(testDialects)('a DAG scheduled on a signal without a startDate, on %s', (dialect) => {
  it('runs the versions sent after a scheduler first saw it, those sent while no scheduler ran before its first run included', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-no-start');
    writeFileSync(path.join(dags, 'from_now.mjs'), NO_START);
    await processDagFolder(db, dags);
    // Sent before any scheduler saw the DAG: history, not run.
    await sendSignal(db, 'events.new', 'old');
    await sendSignal(db, 'events.new', 'old');
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '0.5'];
    const first = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    await started(first);
    await waitFor(
      async () => (await db.db.selectFrom('dag_signal_start').select('after_version').where('dag_id', '=', 'from_now').executeTakeFirst()) !== undefined,
      {
        what: 'the start point recorded',
      },
    );
    await stopCleanly([first]);
    // Sent while no scheduler runs, before the DAG's first run.
    await sendSignal(db, 'events.new', 'missed');
    const again = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...fast]);
    for (const proc of [again, worker]) await started(proc);
    await sendSignal(db, 'events.new', 'live');
    const runs = async () =>
      (await db.db.selectFrom('dag_run').select('run_id').where('dag_id', '=', 'from_now').where('state', '=', 'success').orderBy('run_id').execute()).map(
        (run) => run.run_id,
      );
    await waitFor(async () => (await runs()).length === 2, { what: 'two runs done', timeoutMs: 30_000 });
    expect(await runs()).toEqual(['signal__3', 'signal__4']);
    await stopCleanly([again, worker]);
  }, 90_000);
});

describe('a signal schedule', () => {
  it('is refused at DAG load when its key or its options cannot work, naming the field', () => {
    expect(() => new Dag({ dagId: 'd', schedule: { signal: 'has space' } })).toThrow('DAG d: schedule.signal "has space" is not a key');
    expect(() => new Dag({ dagId: 'd', schedule: { signal: 'k', extra: 1 } as never })).toThrow(
      'DAG d: schedule has "extra"; a signal schedule is { signal: KEY } alone',
    );
    expect(() => new Dag({ dagId: 'd', schedule: { signal: 'k' }, catchup: true })).toThrow('DAG d: catchup has no meaning with a signal schedule');
    expect(new Dag({ dagId: 'd', schedule: { signal: 'k' } }).signalSchedule).toEqual({ key: 'k', startDate: null });
  });
});
