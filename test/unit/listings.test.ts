// The storage listings the CLI and the status page print (runs, triggers, jobs, workers' held
// task instances, deferred task instances), on every dialect: their order, filters, pages and counts. The commands that print
// them are tested as processes on one dialect (cli-dags, cli-triggers, cli-jobs): what differs
// between dialects is here.
import { afterAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { anyOf } from '../../src/authoring/triggers/composite-trigger.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { openStores } from '../../src/storage/index.ts';
import { DateTimeTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, type TestDatabase } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('storage listings on %s', (dialect) => {
  const opened: TestDatabase[] = [];
  afterAll(async () => {
    for (const db of opened) await db.close();
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    opened.push(db);
    return db;
  };

  it('DAG runs: newest logical date first (ties by id), filtered by DAG, state and a first moment, at most the limit', async () => {
    const db = await database();
    const stores = openStores(db);
    const run = (dagId: string, runId: string, state: 'queued' | 'running' | 'success' | 'failed', logicalDate: string) =>
      db.db
        .insertInto('dag_run')
        .values({
          dag_id: dagId,
          run_id: runId,
          run_type: 'manual',
          state,
          logical_date: toDbTime(Date.parse(logicalDate)),
          data_interval_start: null,
          data_interval_end: null,
          conf: '{}',
          dag_hash: null,
          created_at: toDbTime(Date.now()),
          updated_at: toDbTime(Date.now()),
        })
        .execute();
    await run('a', 'first', 'failed', '2026-01-01T00:00:00Z');
    await run('a', 'second', 'queued', '2026-01-02T00:00:00Z');
    await run('b', 'other', 'success', '2026-01-03T00:00:00Z');
    // The same moment as a/second (a DAG has one run a moment): the later row first.
    await run('c', 'third', 'failed', '2026-01-02T00:00:00Z');
    const ids = (rows: { dagId: string; runId: string }[]) => rows.map((row) => `${row.dagId}/${row.runId}`);
    expect(ids(await stores.dagRuns.listDagRuns({ limit: 10 }))).toEqual(['b/other', 'c/third', 'a/second', 'a/first']);
    expect(ids(await stores.dagRuns.listDagRuns({ dagId: 'a', limit: 10 }))).toEqual(['a/second', 'a/first']);
    expect(ids(await stores.dagRuns.listDagRuns({ state: 'failed', limit: 10 }))).toEqual(['c/third', 'a/first']);
    expect(ids(await stores.dagRuns.listDagRuns({ dagId: 'a', state: 'failed', limit: 10 }))).toEqual(['a/first']);
    expect(ids(await stores.dagRuns.listDagRuns({ state: 'success', limit: 10 }))).toEqual(['b/other']);
    expect(ids(await stores.dagRuns.listDagRuns({ limit: 2 }))).toEqual(['b/other', 'c/third']);
    expect(await stores.dagRuns.listDagRuns({ dagId: 'none', limit: 10 })).toEqual([]);
    // From a moment on (the grid's date filter): that moment's own runs included.
    expect(ids(await stores.dagRuns.listDagRuns({ since: Date.parse('2026-01-02T00:00:00Z'), limit: 10 }))).toEqual(['b/other', 'c/third', 'a/second']);
    expect(ids(await stores.dagRuns.listDagRuns({ dagId: 'a', state: 'failed', since: Date.parse('2026-01-02T00:00:00Z'), limit: 10 }))).toEqual([]);
    const [newest] = await stores.dagRuns.listDagRuns({ limit: 1 });
    expect(newest).toMatchObject({ runType: 'manual', state: 'success', logicalDate: Date.parse('2026-01-03T00:00:00Z'), startDate: null, endDate: null });
    expect(await stores.dagRuns.findDagRun('a', 'second')).toMatchObject({ state: 'queued' });
    expect(await stores.dagRuns.findDagRun('a', 'nope')).toBeNull();
  });

  it('triggers: oldest first with their owner and host, the task instances waiting on each (a shared one all of them), composites they are members of, by owner and by page', async () => {
    const db = await database();
    const stores = openStores(db);
    const defer = async (trigger: DateTimeTrigger | ReturnType<typeof anyOf>) => {
      const id = await createTaskInstance(db);
      await stores.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
      return id;
    };
    const at = (moment: string) => new DateTimeTrigger({ moment });
    expect(await stores.triggers.listTriggers({ limit: 10, perTrigger: 5 })).toEqual([]);
    const shared = [await defer(at('2100-01-01T00:00:00Z')), await defer(at('2100-01-01T00:00:00Z')), await defer(at('2100-01-01T00:00:00Z'))];
    const alone = await defer(at('2101-01-01T00:00:00Z'));
    const listed = await stores.triggers.listTriggers({ limit: 10, perTrigger: 2 });
    expect(listed.map((row) => [row.classpath, row.triggererId, row.triggererHost, row.taskInstanceCount, row.taskInstances.map((ti) => ti.id)])).toEqual([
      ['deferflow.triggers.DateTimeTrigger', null, null, 3, shared.slice(0, 2)],
      ['deferflow.triggers.DateTimeTrigger', null, null, 1, [alone]],
    ]);
    expect(listed[0]!.taskInstances[0]).toMatchObject({ dagId: 'test_dag', runId: 'manual__1' });
    expect(listed[0]!.createdAt).toBeGreaterThan(Date.now() - 60_000);

    const jobId = await stores.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'host-a', pid: 1, capacity: 10 });
    await db.db.updateTable('trigger').set({ triggerer_id: jobId }).where('id', '=', listed[1]!.id).execute();
    const owned = await stores.triggers.listTriggers({ limit: 10, perTrigger: 2, triggererId: jobId });
    expect(owned.map((row) => [row.id, row.triggererId, row.triggererHost])).toEqual([[listed[1]!.id, jobId, 'host-a']]);
    expect(await stores.triggers.listTriggers({ limit: 10, perTrigger: 2, triggererId: jobId + 100 })).toEqual([]);
    expect((await stores.triggers.listTriggers({ limit: 1, perTrigger: 2 })).map((row) => row.id)).toEqual([listed[0]!.id]);
    expect((await stores.triggers.listTriggers({ limit: 10, perTrigger: 2, afterId: listed[0]!.id })).map((row) => row.id)).toEqual([listed[1]!.id]);

    // A composite's members are waited on through it: each names it, and it has the task instance.
    const composite = await defer(anyOf([at('2100-01-01T00:00:00Z'), at('2102-01-01T00:00:00Z')]));
    const all = await stores.triggers.listTriggers({ limit: 10, perTrigger: 5 });
    const anyRow = all.find((row) => row.classpath === 'deferflow.triggers.AnyOf')!;
    expect(all.map((row) => [row.classpath, row.taskInstanceCount, row.memberOf])).toEqual([
      ['deferflow.triggers.DateTimeTrigger', 3, [anyRow.id]],
      ['deferflow.triggers.DateTimeTrigger', 1, []],
      ['deferflow.triggers.AnyOf', 1, []],
      ['deferflow.triggers.DateTimeTrigger', 0, [anyRow.id]],
    ]);
    expect(anyRow.taskInstances.map((ti) => ti.id)).toEqual([composite]);
  });

  it('jobs: newest first, by type and host; running only: the rows still saying running, freshest heartbeat first', async () => {
    const db = await database();
    const stores = openStores(db);
    const t0 = Date.parse('2026-05-01T00:00:00Z');
    const first = await stores.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'a', pid: 11, capacity: 100, queues: 'default,gpu' }, t0);
    const second = await stores.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'b', pid: 12, capacity: 4 }, t0 + 1000);
    const third = await stores.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'b', pid: 13, capacity: 100 }, t0 + 2000);
    await stores.jobs.heartbeatJob(first, t0 + 9000);
    await stores.jobs.endJob(second, 'success', t0 + 5000);
    const ids = (rows: { id: number }[]) => rows.map((row) => row.id);
    expect(ids(await stores.jobs.listJobs({ limit: 10 }))).toEqual([third, second, first]);
    expect(ids(await stores.jobs.listJobs({ limit: 10, jobType: 'TriggererJob' }))).toEqual([third, first]);
    expect(ids(await stores.jobs.listJobs({ limit: 10, hostname: 'b' }))).toEqual([third, second]);
    expect(ids(await stores.jobs.listJobs({ limit: 10, runningOnly: true }))).toEqual([first, third]);
    expect(ids(await stores.jobs.listJobs({ limit: 1 }))).toEqual([third]);
    const [job] = await stores.jobs.listJobs({ limit: 1, hostname: 'a' });
    expect(job).toMatchObject({
      jobType: 'TriggererJob',
      state: 'running',
      pid: 11,
      capacity: 100,
      startDate: t0,
      latestHeartbeat: t0 + 9000,
      queues: 'default,gpu',
      endDate: null,
    });
    const [ended] = await stores.jobs.listJobs({ limit: 1, jobType: 'WorkerJob' });
    expect(ended).toMatchObject({ state: 'success', endDate: t0 + 5000 });
  });

  it("workers' held task instances: queued for or running on each asked worker, counted; finished or others' left out", async () => {
    const db = await database();
    const stores = openStores(db);
    const [one, two, other] = [
      await stores.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'a', pid: 21, capacity: 4 }),
      await stores.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'a', pid: 22, capacity: 4 }),
      await stores.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'a', pid: 23, capacity: 4 }),
    ];
    const holding = async (worker: number, state: 'queued' | 'running' | 'success') => {
      const id = await createTaskInstance(db, { state });
      await db.db.updateTable('task_instance').set({ worker_job_id: worker }).where('id', '=', id).execute();
    };
    await holding(one, 'running');
    await holding(one, 'queued');
    await holding(one, 'success');
    await holding(other, 'running');
    await createTaskInstance(db, { state: 'scheduled' });
    expect(await stores.taskInstances.heldTaskInstanceCounts([one, two])).toEqual(new Map([[one, 2]]));
    expect(await stores.taskInstances.heldTaskInstanceCounts([])).toEqual(new Map());
  });

  it("a DAG's grid: the task instances of the asked runs of that DAG, every map index, by run and task", async () => {
    const db = await database();
    const stores = openStores(db);
    const at = async (dagId: string, runId: string, taskId: string, state: 'success' | 'failed', mapIndex = -1) =>
      (
        await db.db
          .insertInto('task_instance')
          .values({ dag_id: dagId, task_id: taskId, run_id: runId, state, map_index: mapIndex })
          .returning('id')
          .executeTakeFirstOrThrow()
      ).id;
    const ok = await at('etl', 'r1', 'load', 'success');
    const failed = await at('etl', 'r2', 'load', 'failed');
    const mapped = [await at('etl', 'r2', 'fan', 'success', 0), await at('etl', 'r2', 'fan', 'success', 1)];
    await at('etl', 'r3', 'load', 'success');
    await at('other', 'r1', 'load', 'success');
    const grid = await stores.taskInstances.taskInstanceGrid('etl', ['r1', 'r2']);
    expect(grid.map((cell) => [cell.id, cell.runId, cell.taskId, cell.mapIndex, cell.state])).toEqual([
      [ok, 'r1', 'load', -1, 'success'],
      [mapped[0], 'r2', 'fan', 0, 'success'],
      [mapped[1], 'r2', 'fan', 1, 'success'],
      [failed, 'r2', 'load', -1, 'failed'],
    ]);
    expect(await stores.taskInstances.taskInstanceGrid('etl', [])).toEqual([]);
  });

  it('deferred task instances: by id, a page after an id, of one DAG', async () => {
    const db = await database();
    const stores = openStores(db);
    const defer = async (dagId: string) => {
      const id = await createTaskInstance(db, { dagId });
      await stores.taskInstances.deferTaskInstance(
        id,
        new TaskDeferred({ trigger: new DateTimeTrigger({ moment: '2100-01-01T00:00:00Z' }), method: 'resume' }),
      );
      return id;
    };
    const ids = [await defer('x'), await defer('y'), await defer('x')];
    await createTaskInstance(db, { dagId: 'x', state: 'running' });
    const listed = (rows: { id: number }[]) => rows.map((row) => row.id);
    expect(listed(await stores.taskInstances.listDeferredTaskInstances({ limit: 10 }))).toEqual(ids);
    expect(listed(await stores.taskInstances.listDeferredTaskInstances({ limit: 10, afterId: ids[0] }))).toEqual(ids.slice(1));
    expect(listed(await stores.taskInstances.listDeferredTaskInstances({ limit: 10, dagId: 'x' }))).toEqual([ids[0], ids[2]]);
    expect(listed(await stores.taskInstances.listDeferredTaskInstances({ limit: 1 }))).toEqual([ids[0]]);
  });
});
