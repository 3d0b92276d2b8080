// The storage side of signal actions, on both dialects, judged by rows: a version is acted on
// once, from the state it was planned from; a deferred task restarted or stopped loses its
// trigger; a running one is asked to stop and its worker carries the request out, which wins
// over the try's own outcome.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred, type TaskInstanceState } from '../../../src/index.ts';
import { toDbTime } from '../../../src/internals.ts';
import { openStores } from '../../../src/storage/index.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, type TestDatabase } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('signal actions in storage on %s', (dialect) => {
  const open: TestDatabase[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });

  async function setup() {
    const db = await migratedDatabase(dialect);
    open.push(db);
    const now = toDbTime(Date.now());
    // The fixture's task instances belong to test_dag's run manual__1: it must be unfinished.
    await db.db
      .insertInto('dag_run')
      .values({
        dag_id: 'test_dag',
        run_id: 'manual__1',
        run_type: 'manual',
        logical_date: now,
        state: 'running',
        conf: '{}',
        created_at: now,
        updated_at: now,
      })
      .execute();
    const storage = openStores(db);
    const watching = async (state: TaskInstanceState | null) => {
      const id = await createTaskInstance(db, { state: state ?? 'scheduled' });
      if (state === null) await db.db.updateTable('task_instance').set({ state: null }).where('id', '=', id).execute();
      await db.db.insertInto('task_instance_signal').values({ task_instance_id: id, signal_key: 'k', version: 0 }).execute();
      return id;
    };
    const pendingFor = async (id: number) => (await storage.signals.pendingSignalActions(100)).find((pending) => pending.taskInstanceId === id)!;
    return { db, storage, watching, pendingFor };
  }

  it('reads the signals after each of 5,000 keys in one query (a triggerer with that many distinct waits), each key from its own version', async () => {
    const { storage } = await setup();
    const keys = Array.from({ length: 5000 }, (_, i) => `many.${i}`);
    for (const key of keys.slice(0, 3)) {
      await storage.signals.sendSignal(key, '"first"');
      await storage.signals.sendSignal(key, '"second"');
    }
    const after = new Map(keys.map((key, i) => [key, i === 1 ? 1 : 0]));
    const read = await storage.signals.signalsAfter(after, 100);
    expect(read.map((signal) => [signal.key, signal.version, signal.value])).toEqual([
      ['many.0', 1, 'first'],
      ['many.0', 2, 'second'],
      ['many.1', 2, 'second'],
      ['many.2', 1, 'first'],
      ['many.2', 2, 'second'],
    ]);
    expect(await storage.signals.signalsAfter(after, 2)).toHaveLength(2);
  });

  it('restarts a deferred task instance afresh, dropping its trigger, once per version', async () => {
    const { db, storage, watching, pendingFor } = await setup();
    const id = await watching('running');
    await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume', timeout: 600 }));
    expect(await storage.signals.pendingSignalActions(100)).toEqual([]);
    await storage.signals.sendSignal('k', '"go"');
    const pending = await pendingFor(id);
    expect(pending).toMatchObject({ state: 'deferred', key: 'k', seenVersion: 0, latestVersion: 1 });

    expect(await storage.signals.applySignalAction(pending, { kind: 'fresh-try' })).toBe('acted');
    expect(await taskInstance(db, id)).toMatchObject({ state: 'scheduled', trigger_id: null, trigger_timeout: null, next_method: null, next_kwargs: null });
    expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);
    expect(
      Number(
        (await db.db.selectFrom('task_instance_signal').select('acted_version').where('task_instance_id', '=', id).executeTakeFirstOrThrow()).acted_version,
      ),
    ).toBe(1);
    // A second scheduler with the same read finds it taken, and changes nothing.
    expect(await storage.signals.applySignalAction(pending, { kind: 'end', state: 'skipped' })).toBe('taken');
    expect((await taskInstance(db, id)).state).toBe('scheduled');
    expect(await storage.signals.pendingSignalActions(100)).toEqual([]);
    expect(await storage.signals.readActedSignal(id, 'k')).toMatchObject({ key: 'k', version: 1, value: 'go' });
  });

  it('leaves the version untaken when the state moved on since the read, and stops a task with no state yet', async () => {
    const { db, storage, watching, pendingFor } = await setup();
    const moving = await watching('success');
    const waiting = await watching(null);
    await storage.signals.sendSignal('k', 'null');
    const stale = await pendingFor(moving);
    await db.db.updateTable('task_instance').set({ state: 'failed' }).where('id', '=', moving).execute();
    expect(await storage.signals.applySignalAction(stale, { kind: 'fresh-try' })).toBe('moved');
    expect((await taskInstance(db, moving)).state).toBe('failed');
    expect((await pendingFor(moving)).seenVersion).toBe(0); // rolled back: planned again next pass

    expect(await storage.signals.applySignalAction(await pendingFor(waiting), { kind: 'end', state: 'skipped' })).toBe('acted');
    const stopped = await taskInstance(db, waiting);
    expect(stopped.state).toBe('skipped');
    expect(stopped.end_date).not.toBe(null);
  });

  it("asks a running try's worker to stop; its outcome and deferral are refused, and the request is carried out by that worker alone", async () => {
    const { db, storage, watching, pendingFor } = await setup();
    const jobId = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 1 });
    const id = await watching('running');
    await db.db.updateTable('task_instance').set({ worker_job_id: jobId }).where('id', '=', id).execute();
    const held = { workerJobId: jobId, tryNumber: (await taskInstance(db, id)).try_number };
    await storage.signals.sendSignal('k', 'null');
    expect(await storage.signals.applySignalAction(await pendingFor(id), { kind: 'request', request: 'failed' })).toBe('acted');
    expect(await taskInstance(db, id)).toMatchObject({ state: 'running', stop_request: 'failed' });
    expect(await storage.taskInstances.checkHeldTries(new Map([[id, held]]))).toEqual(new Map([[id, { kind: 'stop-requested', request: 'failed' }]]));

    expect(await storage.taskInstances.finishTaskInstance(id, held, { state: 'success', returnValueJson: '1' })).toBe(false);
    await expect(storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }))).rejects.toThrow(
      'is being stopped by a signal (failed); it does not defer',
    );
    expect(await storage.taskInstances.handBackTaskInstance(id, jobId)).toBe(false);
    expect(await storage.taskInstances.carryOutStopRequest(id, { ...held, workerJobId: jobId + 1 })).toBe(null);
    expect(await storage.taskInstances.carryOutStopRequest(id, held)).toBe('failed');
    expect(await taskInstance(db, id)).toMatchObject({ state: 'failed', stop_request: null, worker_job_id: null, return_value: null });
    expect(await storage.taskInstances.carryOutStopRequest(id, held)).toBe(null);
  });
});
