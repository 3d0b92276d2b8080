// Queues in the storage layer, on both dialects, judged by database rows: which task instances a
// worker claims for the queues it serves (priority across several), the queue a deferral's
// trigger rows inherit (composite members too) and that identical waits share a row only within
// a queue, which triggers a triggerer claims, and which queues have work no live daemon serves.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { anyOf } from '../../src/authoring/triggers/composite-trigger.ts';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { livenessLocksOf } from '../../src/database/liveness-locks.ts';
import { checkQueue, DEFAULT_QUEUES, queueListText, queueSetOf } from '../../src/model/queues.ts';
import { readQueueCoverage, unservedWork } from '../../src/services/jobs/queue-coverage.ts';
import { openStores } from '../../src/storage/index.ts';
import { DateTimeTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, type TestDatabase } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

describe('queue names', () => {
  it('names work in no queue default, checks names, and reads --queues as a set', () => {
    expect(checkQueue(undefined)).toBe('default');
    expect(checkQueue('gpu-2.large_x')).toBe('gpu-2.large_x');
    for (const bad of ['', 'has space', 'a,b', '-leading', 'x'.repeat(65), 7])
      expect(() => checkQueue(bad), JSON.stringify(bad)).toThrow(/queue must be a name of letters, digits/);
    expect(queueSetOf('')).toEqual(DEFAULT_QUEUES);
    expect(queueSetOf(' gpu , default,gpu,cpu ')).toEqual(['cpu', 'default', 'gpu']);
    expect(queueSetOf(['gpu'])).toEqual(['gpu']);
    expect(queueListText(queueSetOf('gpu,default'))).toBe('default,gpu');
  });
});

describe.each(testDialects)('queues in storage on %s', (dialect) => {
  const open: TestDatabase[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const worker = async (db: TestDatabase, queues: string) => {
    const jobId = await openStores(db).jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 8, queues });
    return { jobId, hostname: 'h', pid: 1 };
  };

  it('a worker claims only the task instances of the queues it serves, the highest weights across them first', async () => {
    const db = await database();
    const storage = openStores(db);
    const ids = {
      plain: await createTaskInstance(db, { state: 'scheduled', priorityWeight: 5 }),
      gpuLow: await createTaskInstance(db, { state: 'scheduled', queue: 'gpu', priorityWeight: 1 }),
      gpuHigh: await createTaskInstance(db, { state: 'scheduled', queue: 'gpu', priorityWeight: 9 }),
      cpu: await createTaskInstance(db, { state: 'scheduled', queue: 'cpu', priorityWeight: 7 }),
      plainLow: await createTaskInstance(db, { state: 'scheduled', priorityWeight: 0 }),
    };
    const claim = async (queues: string, limit: number) =>
      (await storage.taskInstances.claimTaskInstances(await worker(db, queues), limit, Date.now(), { queues: queueSetOf(queues) })).map((ti) => ti.id);
    // Serving gpu and default, two slots: the best two of both queues (9 in gpu, 5 in default).
    expect((await claim('gpu,default', 2)).sort()).toEqual([ids.gpuHigh, ids.plain].sort());
    // Serving gpu only: what is left of gpu, nothing of default or cpu.
    expect(await claim('gpu', 10)).toEqual([ids.gpuLow]);
    // A worker given no --queues serves default.
    expect((await storage.taskInstances.claimTaskInstances(await worker(db, 'default'), 10, Date.now())).map((ti) => ti.id)).toEqual([ids.plainLow]);
    const cpu = await db.db.selectFrom('task_instance').select(['state', 'queue']).where('id', '=', ids.cpu).executeTakeFirstOrThrow();
    expect(cpu).toEqual({ state: 'scheduled', queue: 'cpu' });
    const claimed = await storage.taskInstances.claimTaskInstances(await worker(db, 'cpu'), 10, Date.now(), { queues: queueSetOf('cpu') });
    expect(claimed.map((ti) => [ti.id, ti.queue])).toEqual([[ids.cpu, 'cpu']]);
  });

  it("a deferral's trigger rows inherit the task's queue; identical waits share a row within a queue only; triggerers claim their queues' triggers", async () => {
    const db = await database();
    const storage = openStores(db);
    const hour = new Date(Date.now() + 3_600_000);
    const at = (moment: Date) => new DateTimeTrigger({ moment });
    const wait = () => new TaskDeferred({ trigger: at(hour), method: 'resume' });
    const inGpu = [await createTaskInstance(db, { queue: 'gpu' }), await createTaskInstance(db, { queue: 'gpu' })];
    const inDefault = await createTaskInstance(db);
    const gpuRows = [];
    for (const id of inGpu) gpuRows.push((await storage.taskInstances.deferTaskInstance(id, wait())).triggerId);
    const defaultRow = (await storage.taskInstances.deferTaskInstance(inDefault, wait())).triggerId;
    expect(gpuRows[1]).toBe(gpuRows[0]);
    expect(defaultRow).not.toBe(gpuRows[0]);
    // A composite wait and its members: all in the task's queue.
    const composite = await createTaskInstance(db, { queue: 'gpu' });
    const compositeRow = (
      await storage.taskInstances.deferTaskInstance(
        composite,
        new TaskDeferred({ trigger: anyOf([at(new Date(hour.getTime() + 3_600_000)), at(hour)]), method: 'resume' }),
      )
    ).triggerId;
    const members = await db.db.selectFrom('trigger_member').select('member_id').where('composite_id', '=', compositeRow).execute();
    // The one-hour member is the gpu tasks' own wait, shared.
    expect(members.map((member) => member.member_id)).toContain(gpuRows[0]);
    const queueOf = async (id: number) => (await db.db.selectFrom('trigger').select('queue').where('id', '=', id).executeTakeFirstOrThrow()).queue;
    expect(await queueOf(gpuRows[0]!)).toBe('gpu');
    expect(await queueOf(defaultRow)).toBe('default');
    expect(await queueOf(compositeRow)).toBe('gpu');
    for (const member of members) expect(await queueOf(member.member_id)).toBe('gpu');

    const triggerer = (queues: string) => storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'h', pid: 2, capacity: 100, queues });
    const defaultTriggerer = await triggerer('default');
    expect((await storage.triggers.claimTriggers(defaultTriggerer, 100)).claimed).toBe(1);
    const gpuTriggerer = await triggerer('gpu');
    expect((await storage.triggers.claimTriggers(gpuTriggerer, 100, { queues: queueSetOf('gpu') })).claimed).toBe(3);
    const owners = await db.db.selectFrom('trigger').select(['id', 'triggerer_id']).orderBy('id').execute();
    expect(owners.map((row) => row.triggerer_id)).toEqual(owners.map((row) => (row.id === defaultRow ? defaultTriggerer : gpuTriggerer)));
  });

  it('reports the queues whose work no live daemon serves, by kind', async () => {
    const db = await database();
    const storage = openStores(db);
    const locks = livenessLocksOf(db);
    const thresholds = { triggererMs: 10_000, workerMs: 10_000 };
    await createTaskInstance(db, { state: 'scheduled', queue: 'gpu' });
    await createTaskInstance(db, { state: 'scheduled', queue: 'gpu' });
    await createTaskInstance(db, { state: 'scheduled' });
    const deferred = await createTaskInstance(db, { queue: 'io' });
    await storage.taskInstances.deferTaskInstance(
      deferred,
      new TaskDeferred({ trigger: new DateTimeTrigger({ moment: new Date(Date.now() + 3_600_000) }), method: 'resume' }),
    );
    const coverage = () => readQueueCoverage(storage, locks, thresholds, Date.now());
    expect(unservedWork(await coverage())).toEqual([
      { queue: 'default', kind: 'task_instances', count: 1 },
      { queue: 'gpu', kind: 'task_instances', count: 2 },
      { queue: 'io', kind: 'triggers', count: 1 },
    ]);
    // Live daemons serving them: a worker for default and gpu, a triggerer for io.
    const gpuWorker = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 8, queues: 'default,gpu' });
    const ioTriggerer = await storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'h', pid: 2, capacity: 8, queues: 'io' });
    expect(unservedWork(await coverage())).toEqual([]);
    expect(await coverage()).toEqual([
      { queue: 'default', scheduledTaskInstances: 1, liveWorkers: [gpuWorker], unownedTriggers: 0, liveTriggerers: [] },
      { queue: 'gpu', scheduledTaskInstances: 2, liveWorkers: [gpuWorker], unownedTriggers: 0, liveTriggerers: [] },
      { queue: 'io', scheduledTaskInstances: 0, liveWorkers: [], unownedTriggers: 1, liveTriggerers: [ioTriggerer] },
    ]);
    // A worker that ended, or whose heartbeat is past the threshold, serves nothing.
    await storage.jobs.endJob(gpuWorker, 'success');
    await storage.jobs.heartbeatJob(ioTriggerer, Date.now() - 60_000);
    expect(unservedWork(await coverage()).map((work) => `${work.queue}:${work.kind}`)).toEqual(['default:task_instances', 'gpu:task_instances', 'io:triggers']);
  });
});
