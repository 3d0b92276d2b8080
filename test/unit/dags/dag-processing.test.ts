// DAG files in a folder → serialized DAGs and import errors → scheduler and worker running them.
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processDagFolder, serializedDagSource } from '../../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../../src/services/dags/manual-run.ts';
import { openStores } from '../../../src/storage/index.ts';
import { Scheduler } from '../../../src/daemons/scheduler/scheduler.ts';
import { dagFileResolver } from '../../../src/daemons/worker/dag-file-resolver.ts';
import { Worker } from '../../../src/daemons/worker/worker.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS } from '../../support/processes.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { LogCapture, migratedDatabase, waitFor, type TestDatabase } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);

const INDEX = PACKAGE_ENTRY;
const dagFile = (dagId: string, { retries = 0, value = 'done' } = {}) => `
import { BaseOperator, Dag } from ${JSON.stringify(INDEX)};
class Step extends BaseOperator {
  constructor(taskId: string, readonly value: string) { super({ taskId }); }
  execute() { return this.value; }
}
export const dag = new Dag({ dagId: ${JSON.stringify(dagId)}, defaultArgs: { retries: ${retries} } });
const extract = new Step('extract', 'rows');
const load = new Step('load', ${JSON.stringify(value)});
dag.add(extract, load);
extract.before(load);
`;

describe.each(testDialects)('DAG processing on %s', (dialect) => {
  const open: { databases: TestDatabase[]; dirs: string[]; stops: (() => Promise<void>)[] } = { databases: [], dirs: [], stops: [] };
  afterEach(async () => {
    for (const stop of open.stops.splice(0).reverse()) await stop();
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
    for (const dir of open.dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  const setup = async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'deferflow-dags-'));
    open.dirs.push(dir);
    const write = (name: string, text: string) => writeFileSync(path.join(dir, name), text);
    const rows = async () =>
      Object.fromEntries(
        (await db.db.selectFrom('serialized_dag').select(['dag_id', 'deleted_at', 'hash']).execute()).map((r) => [
          r.dag_id,
          r.deleted_at === null ? 'live' : 'deleted',
        ]),
      );
    const importErrors = async () =>
      Object.fromEntries((await db.db.selectFrom('import_error').select(['fileloc', 'message']).execute()).map((r) => [path.basename(r.fileloc), r.message]));
    return { db, dir, write, rows, importErrors };
  };

  it("refuses a watcher that would read through another DAG's different watcher's queue (each would miss the other's messages); alike and shared watchers are one row", async () => {
    const { db, dir, write, rows, importErrors } = await setup();
    const watching = (dagId: string, kwargs: string) => `
import { BaseOperator, Dag } from ${JSON.stringify(INDEX)};
import { RabbitMqTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Step extends BaseOperator { execute() { return null; } }
export const dag = new Dag({ dagId: ${JSON.stringify(dagId)}, schedule: { watch: new RabbitMqTrigger({ connection: 'bus', exchange: 'orders', ${kwargs} }) } }).add(new Step({ taskId: 'handle' }));
`;
    write('a.ts', watching('a', 'batch: 50'));
    // The default queue is named by the exchange, routing key and match: the same as a's, read by another row.
    write('b.ts', watching('b', 'batch: 100'));
    write('c.ts', watching('c', 'batch: 50'));
    write('d.ts', watching('d', "match: { kind: 'paid' }, shared: true"));
    write('e.ts', watching('e', "match: { kind: 'refund' }, shared: true"));
    await processDagFolder(db, dir);
    expect(await rows()).toEqual({ a: 'live', c: 'live', d: 'live', e: 'live' });
    expect(Object.keys(await importErrors())).toEqual(['b.ts']);
    expect((await importErrors())['b.ts']).toContain(
      'DAG b: schedule.watch[0] reads through amqp:bus:queue:deferflow.orders.#, which a different watcher of DAG a reads (their kwargs or queues differ)',
    );
    // a and c alike: one row; d and e shared, differing only in their filters: one row.
    expect((await db.db.selectFrom('trigger').select('id').where('watcher', '=', 1).execute()).length).toBe(2);
  });

  it('records serialized DAGs and import errors; one broken file never stops the others; changes and deletions are tracked', async () => {
    const { db, dir, write, rows, importErrors } = await setup();
    write('etl.ts', dagFile('etl'));
    write('reports.ts', dagFile('reports'));
    write('broken.ts', `${dagFile('broken')}\nthrow new Error('cannot reach the config service');`);
    write('zz-copycat.ts', dagFile('etl'));
    write('loop.ts', dagFile('loop').replace('extract.before(load);', 'extract.before(load).before(extract);'));
    write('_helpers.ts', 'throw new Error("never imported");');

    const first = await processDagFolder(db, dir);
    expect(first.written).toEqual({ etl: 'created', reports: 'created' });
    expect(await rows()).toEqual({ etl: 'live', reports: 'live' });
    const errors = await importErrors();
    expect(Object.keys(errors).sort()).toEqual(['broken.ts', 'loop.ts', 'zz-copycat.ts']);
    expect(errors['broken.ts']).toContain('Error: cannot reach the config service');
    expect(errors['zz-copycat.ts']).toBe(`DAG etl is already defined in ${path.join(dir, 'etl.ts')}`);
    expect(errors['loop.ts']).toContain('DAG loop has a cycle: extract -> load -> extract');

    expect((await processDagFolder(db, dir)).written).toEqual({ etl: 'unchanged', reports: 'unchanged' });
    write('etl.ts', dagFile('etl', { retries: 3 }));
    expect((await processDagFolder(db, dir)).written).toMatchObject({ etl: 'updated' });
    const stored = await db.db.selectFrom('serialized_dag').select('data').where('dag_id', '=', 'etl').executeTakeFirstOrThrow();
    expect(JSON.parse(stored.data).dag.tasks.map((task: { retries: number }) => task.retries)).toEqual([3, 3]);

    rmSync(path.join(dir, 'reports.ts'));
    write('broken.ts', dagFile('broken'));
    const later = await processDagFolder(db, dir);
    expect(later.deleted).toEqual(['reports']);
    expect(await rows()).toEqual({ etl: 'live', reports: 'deleted', broken: 'live' });
    expect(Object.keys(await importErrors()).sort()).toEqual(['loop.ts', 'zz-copycat.ts']);
  });

  it('follows symbolic links to DAG files and folders (git-sync swapping its link to a new checkout, a ConfigMap mounted as links), once per folder; a link to nothing is passed by', async () => {
    const { db, dir, rows, importErrors } = await setup();
    // Outside the DAG folder: two checkouts, as git-sync keeps them, and a file mounted by link.
    const outside = mkdtempSync(path.join(os.tmpdir(), 'deferflow-linked-'));
    open.dirs.push(outside);
    for (const [checkout, retries] of [
      ['one', 1],
      ['two', 2],
    ] as const) {
      mkdirSync(path.join(outside, checkout));
      writeFileSync(path.join(outside, checkout, 'synced.ts'), dagFile('synced', { retries }));
    }
    writeFileSync(path.join(outside, 'mounted.ts'), dagFile('mounted'));
    symlinkSync(path.join(outside, 'one'), path.join(dir, 'repo'));
    symlinkSync(path.join(outside, 'mounted.ts'), path.join(dir, 'mounted.ts'));
    symlinkSync('.', path.join(dir, 'again')); // back to the folder itself: walked once
    symlinkSync(path.join(outside, 'nowhere.ts'), path.join(dir, 'dangling.ts'));

    const first = await processDagFolder(db, dir);
    expect(first.written).toEqual({ mounted: 'created', synced: 'created' });
    expect(await importErrors()).toEqual({});
    const stored = async (dagId: string) =>
      db.db.selectFrom('serialized_dag').select(['fileloc', 'data']).where('dag_id', '=', dagId).executeTakeFirstOrThrow();
    // Filelocs are the paths in the DAG folder, which a swap keeps.
    expect((await stored('synced')).fileloc).toBe(path.join(dir, 'repo', 'synced.ts'));
    expect((await stored('mounted')).fileloc).toBe(path.join(dir, 'mounted.ts'));

    // git-sync publishes the next checkout: the same path, the new file.
    const swap = path.join(dir, 'repo.next');
    symlinkSync(path.join(outside, 'two'), swap);
    renameSync(swap, path.join(dir, 'repo'));
    expect((await processDagFolder(db, dir)).written).toEqual({ mounted: 'unchanged', synced: 'updated' });
    expect(JSON.parse((await stored('synced')).data).dag.tasks.map((task: { retries: number }) => task.retries)).toEqual([2, 2]);
    expect(await rows()).toEqual({ mounted: 'live', synced: 'live' });
  });

  it('manual runs: a logical date or run id the DAG already has is refused naming it; runs asked for in one millisecond each get the next free one', async () => {
    const { db, dir, write } = await setup();
    write('etl.mts', dagFile('etl'));
    await processDagFolder(db, dir);
    expect(await triggerDagRun(db, 'etl', { logicalDate: '2026-03-01T11:00:00+01:00' })).toBe('manual__2026-03-01T10:00:00.000Z');
    await expect(triggerDagRun(db, 'etl', { logicalDate: '2026-03-01T10:00:00Z' })).rejects.toMatchObject({
      code: 'DF_INVALID_OPTION',
      message: expect.stringContaining('logical-date: DAG etl already has a run manual__2026-03-01T10:00:00.000Z or a run at 2026-03-01T10:00:00.000Z'),
    });
    expect(await triggerDagRun(db, 'etl', { runId: 'mine', conf: { n: 2 } })).toBe('mine');
    await expect(triggerDagRun(db, 'etl', { runId: 'mine' })).rejects.toMatchObject({
      code: 'DF_INVALID_OPTION',
      message: expect.stringContaining('run-id: DAG etl already has a run mine'),
    });
    const together = await Promise.all([1, 2, 3].map(() => triggerDagRun(db, 'etl', {}, Date.parse('2026-04-01T00:00:00Z'))));
    expect(together.sort()).toEqual(['000', '001', '002'].map((ms) => `manual__2026-04-01T00:00:00.${ms}Z`));
    await expect(triggerDagRun(db, 'etl', { logicalDate: '2026-03-01 10:00' })).rejects.toMatchObject({ code: 'DF_INVALID_OPTION' });
    await expect(triggerDagRun(db, 'elt')).rejects.toMatchObject({ code: 'DF_INVALID_OPTION', message: expect.stringContaining('did you mean etl?') });
    const runs = await openStores(db).dagRuns.listDagRuns({ dagId: 'etl', limit: 10 });
    expect(runs.map((run) => run.runId)).toContain('mine');
    expect(runs).toHaveLength(5);
  });

  it('a wrong folder (empty, or missing) marks nothing deleted; a task of a DAG marked deleted waits instead of failing, and runs when the file is back', async () => {
    const { db, dir, write, rows } = await setup();
    write('etl.ts', dagFile('etl'));
    write('other.ts', dagFile('other'));
    await processDagFolder(db, dir);
    const empty = mkdtempSync(path.join(os.tmpdir(), 'deferflow-empty-'));
    open.dirs.push(empty);
    await expect(processDagFolder(db, empty)).rejects.toMatchObject({ code: 'DF_DAG_FOLDER' });
    await expect(processDagFolder(db, path.join(empty, 'missing'))).rejects.toMatchObject({ code: 'DF_INVALID_OPTION' });
    expect(await rows()).toEqual({ etl: 'live', other: 'live' });

    // The file really goes (and the DAG is marked deleted) while a task instance is scheduled.
    const dags = serializedDagSource(db);
    const log = pino({ level: 'debug' }, new LogCapture());
    const scheduler = new Scheduler(
      db,
      { pollIntervalMs: 50, heartbeatIntervalMs: 500, zombieThresholdMs: 30_000, runsPerPass: 10, hostname: 'test' },
      dags,
      log,
    );
    await scheduler.storage.dagRuns.createDagRun((await dags('etl'))!, { runId: 'while_gone', runType: 'manual', logicalDate: Date.now(), conf: {} });
    await db.db.updateTable('task_instance').set({ state: 'scheduled' }).where('run_id', '=', 'while_gone').where('task_id', '=', 'extract').execute();
    const moved = path.join(empty, 'etl.ts');
    writeFileSync(moved, dagFile('etl'));
    rmSync(path.join(dir, 'etl.ts'));
    expect((await processDagFolder(db, dir)).deleted).toEqual(['etl']);
    const worker = { jobId: 1, hostname: 'test', pid: process.pid };
    expect(await scheduler.storage.taskInstances.claimTaskInstances(worker, 10)).toEqual([]);
    const extract = async () =>
      db.db
        .selectFrom('task_instance')
        .select(['state', 'try_number'])
        .where('run_id', '=', 'while_gone')
        .where('task_id', '=', 'extract')
        .executeTakeFirstOrThrow();
    expect(await extract()).toEqual({ state: 'scheduled', try_number: 0 });

    // The file comes back: the next processing revives the DAG and the task runs.
    writeFileSync(path.join(dir, 'etl.ts'), dagFile('etl'));
    await processDagFolder(db, dir);
    const runner = new Worker(
      db,
      { concurrency: 2, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 200, hostname: 'test' },
      dagFileResolver(db),
      log,
    );
    await runner.start();
    open.stops.push(() => runner.stop());
    await waitFor(async () => (await extract()).state === 'success', { what: 'the task run once its DAG is back' });
  });

  it('a DAG run goes scheduler → worker → success from the folder; the scheduler needs only the serialized DAG', async () => {
    const { db, dir, write } = await setup();
    write('etl.ts', dagFile('etl', { value: 'loaded' }));
    await processDagFolder(db, dir);
    const log = pino({ level: 'debug' }, new LogCapture());
    const dags = serializedDagSource(db);
    const scheduler = new Scheduler(
      db,
      { pollIntervalMs: 50, heartbeatIntervalMs: 500, zombieThresholdMs: 30_000, runsPerPass: 10, hostname: 'test' },
      dags,
      log,
    );
    const worker = new Worker(
      db,
      { concurrency: 2, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 200, hostname: 'test' },
      dagFileResolver(db),
      log,
    );
    await scheduler.storage.dagRuns.createDagRun((await dags('etl'))!, { runId: 'manual__1', runType: 'manual', logicalDate: Date.now(), conf: {} });
    await scheduler.start();
    open.stops.push(() => scheduler.stop());
    await worker.start();
    open.stops.push(() => worker.stop());
    const runState = async (runId: string) => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state;
    await waitFor(async () => (await runState('manual__1')) === 'success', { what: 'the run to succeed' });
    const load = await db.db.selectFrom('task_instance').select('return_value').where('task_id', '=', 'load').executeTakeFirstOrThrow();
    expect(JSON.parse(load.return_value!)).toBe('loaded');

    // The code goes away; the scheduler still schedules from the serialized DAG, and only the
    // worker, which needs the code, fails the task, naming the file.
    await worker.stop();
    rmSync(path.join(dir, 'etl.ts'));
    await scheduler.storage.dagRuns.createDagRun((await dags('etl'))!, { runId: 'manual__2', runType: 'manual', logicalDate: Date.now() + 1, conf: {} });
    await waitFor(
      async () =>
        (await db.db.selectFrom('task_instance').select('state').where('run_id', '=', 'manual__2').where('task_id', '=', 'extract').executeTakeFirstOrThrow())
          .state === 'scheduled',
      { what: 'extract scheduled without the code' },
    );
  });

  it("a task sees its DAG run conf, its params over the DAG's, a logger, and upstream return values", async () => {
    const { db, dir, write } = await setup();
    write(
      'report.ts',
      `
import { BaseOperator, Dag, type RuntimeContext } from ${JSON.stringify(INDEX)};
class Extract extends BaseOperator<RuntimeContext> { execute() { return { rows: 42 }; } }
class Report extends BaseOperator<RuntimeContext> {
  async execute(context: RuntimeContext) {
    context.log.info({ reporting: true }, 'reporting');
    return { extracted: await context.xcomPull('extract'), missing: await context.xcomPull('nope'), day: context.dagRun.conf.day, params: context.params, run: context.dagRun.runId };
  }
}
export const dag = new Dag({ dagId: 'report', params: { region: 'eu', format: 'csv' } });
const extract = new Extract({ taskId: 'extract' });
const report = new Report({ taskId: 'report', params: { format: 'parquet' } });
dag.add(extract, report);
extract.before(report);
`,
    );
    await processDagFolder(db, dir);
    const logs = new LogCapture();
    const log = pino({ level: 'debug' }, logs);
    const dags = serializedDagSource(db);
    const scheduler = new Scheduler(
      db,
      { pollIntervalMs: 50, heartbeatIntervalMs: 500, zombieThresholdMs: 30_000, runsPerPass: 10, hostname: 'test' },
      dags,
      log,
    );
    const worker = new Worker(
      db,
      { concurrency: 2, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 200, hostname: 'test' },
      dagFileResolver(db),
      log,
    );
    await scheduler.storage.dagRuns.createDagRun((await dags('report'))!, {
      runId: 'daily',
      runType: 'manual',
      logicalDate: Date.now(),
      conf: { day: '2026-11-22' },
    });
    await scheduler.start();
    open.stops.push(() => scheduler.stop());
    await worker.start();
    open.stops.push(() => worker.stop());
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'daily').executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run',
    });
    const row = await db.db.selectFrom('task_instance').select('return_value').where('task_id', '=', 'report').executeTakeFirstOrThrow();
    expect(JSON.parse(row.return_value!)).toEqual({
      extracted: { rows: 42 },
      missing: null,
      day: '2026-11-22',
      params: { region: 'eu', format: 'parquet' },
      run: 'daily',
    });
    expect(logs.matching((line) => line.reporting === true)).toMatchObject([{ dag_id: 'report', task_id: 'report', run_id: 'daily', try_number: 1 }]);
  });
});
