// The worker's side of a task instance's life, on both dialects, judged by database rows.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openDatabase, TaskDeferred } from '../../src/index.ts';
import { type AuditEntry, openStores, type Stores } from '../../src/storage/index.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, type TestDatabase, submitEvents } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('task instance transitions on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });
  const database = async (): Promise<TestDatabase> => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const worker = async (storage: Stores, hostname = 'worker-host') => {
    const jobId = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname, pid: 4242, capacity: 4 });
    return { jobId, hostname, pid: 4242 };
  };

  it('claims scheduled task instances only, highest priority first, and records the worker', async () => {
    const db = await database();
    const storage = openStores(db);
    const low = await createTaskInstance(db, { state: 'scheduled', priorityWeight: 1 });
    const high = await createTaskInstance(db, { state: 'scheduled', priorityWeight: 10 });
    const notReady = await createTaskInstance(db, { state: 'up_for_retry' });
    const me = await worker(storage);

    const first = await storage.taskInstances.claimTaskInstances(me, 1);
    expect(first.map((ti) => ti.id)).toEqual([high]);
    expect(await taskInstance(db, high)).toMatchObject({ state: 'queued', worker_job_id: me.jobId, hostname: 'worker-host', pid: 4242 });
    const rest = await storage.taskInstances.claimTaskInstances(me, 10);
    expect(rest.map((ti) => ti.id)).toEqual([low]);
    expect((await taskInstance(db, notReady)).state).toBe('up_for_retry');
    expect(await storage.taskInstances.claimTaskInstances(me, 10)).toEqual([]);
  });

  it('a claim or a start whose answer was lost is found again by its worker: the queued ones it does not hold, the same try started', async () => {
    const db = await database();
    const storage = openStores(db);
    const held = await createTaskInstance(db, { state: 'scheduled' });
    const lost = await createTaskInstance(db, { state: 'scheduled' });
    const me = await worker(storage);
    const other = await worker(storage, 'other-host');
    expect((await storage.taskInstances.claimTaskInstances(me, 2)).map((ti) => ti.id).sort()).toEqual([held, lost].sort());
    expect((await storage.taskInstances.claimedButNotHeld(me.jobId, [held])).map((ti) => ti.id)).toEqual([lost]);
    expect(await storage.taskInstances.claimedButNotHeld(other.jobId, [])).toEqual([]);

    const started = await storage.taskInstances.startTaskInstance(lost, me.jobId, null, 1_000_000);
    // Its answer lost, the worker starts it again: the same try, not a second one, and not null.
    expect(await storage.taskInstances.startTaskInstance(lost, me.jobId, null, 1_000_500)).toMatchObject({ tryNumber: started!.tryNumber, nextMethod: null });
    expect((await taskInstance(db, lost)).try_number).toBe(1);
    expect(await storage.taskInstances.startTaskInstance(lost, other.jobId, null)).toBeNull();
    expect((await storage.taskInstances.claimedButNotHeld(me.jobId, [held])).map((ti) => ti.id)).toEqual([]);
  });

  it('a hand back gives the try back: a fresh run starts as the same try, a resumed one resumes again at next_method', async () => {
    const db = await database();
    const storage = openStores(db);
    const me = await worker(storage);
    const fresh = await createTaskInstance(db, { state: 'scheduled' });
    await storage.taskInstances.claimTaskInstances(me, 1);
    await storage.taskInstances.startTaskInstance(fresh, me.jobId, null);
    expect(await storage.taskInstances.handBackTaskInstance(fresh, me.jobId)).toBe(true);
    expect(await taskInstance(db, fresh)).toMatchObject({ state: 'scheduled', try_number: 0, worker_job_id: null, queued_at: null });
    await storage.taskInstances.claimTaskInstances(me, 1);
    expect((await storage.taskInstances.startTaskInstance(fresh, me.jobId, null))?.tryNumber).toBe(1);

    const resumed = await createTaskInstance(db, { state: 'scheduled' });
    await db.db
      .updateTable('task_instance')
      .set({ try_number: 2, next_method: 'afterWait', next_kwargs: '{"event":"fired"}' })
      .where('id', '=', resumed)
      .execute();
    await storage.taskInstances.claimTaskInstances(me, 1);
    expect(await storage.taskInstances.startTaskInstance(resumed, me.jobId, null)).toMatchObject({ tryNumber: 2, nextMethod: 'afterWait' });
    expect(await storage.taskInstances.handBackTaskInstance(resumed, me.jobId)).toBe(true);
    const row = await taskInstance(db, resumed);
    expect(row).toMatchObject({ state: 'scheduled', try_number: 2, next_method: 'afterWait', next_kwargs: { event: 'fired' } });
    // Only the worker that runs it can hand it back, and only while it runs.
    expect(await storage.taskInstances.handBackTaskInstance(resumed, me.jobId)).toBe(false);
  });

  it('a fresh start takes the next try and fixes the execution deadline; a resume after a deferral keeps both', async () => {
    const db = await database();
    const storage = openStores(db);
    const me = await worker(storage);
    const id = await createTaskInstance(db, { state: 'scheduled' });
    await db.db.updateTable('task_instance').set({ start_date: null }).where('id', '=', id).execute();
    await storage.taskInstances.claimTaskInstances(me, 1, 1_000_000);
    expect(await storage.taskInstances.startTaskInstance(id, me.jobId, 60_000, 1_000_000)).toEqual({
      tryNumber: 1,
      workerJobId: me.jobId,
      nextMethod: null,
      nextKwargsJson: null,
      executionDeadline: 1_060_000,
      startedAt: 1_000_000,
    });

    // Deferring for 10 minutes is cut to what is left of the execution timeout, and frees the worker.
    await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume', timeout: 600 }), 1_010_000);
    const deferred = await taskInstance(db, id);
    expect(deferred).toMatchObject({ state: 'deferred', worker_job_id: null });
    expect(new Date(deferred.trigger_timeout!).getTime()).toBe(1_060_000);

    // The trigger fires; the task instance is claimed and started again: same try, same deadline.
    await submitEvents(storage, [{ triggerId: deferred.trigger_id!, payloadJson: '"ok"' }], 1_020_000);
    await storage.taskInstances.claimTaskInstances(me, 1, 1_030_000);
    const resumed = await storage.taskInstances.startTaskInstance(id, me.jobId, 60_000, 1_030_000);
    expect(resumed).toMatchObject({ tryNumber: 1, nextMethod: 'resume', executionDeadline: 1_060_000 });
    expect(JSON.parse(resumed!.nextKwargsJson!)).toEqual({ event: 'ok' });
    expect(
      await storage.taskInstances.finishTaskInstance(
        id,
        { workerJobId: me.jobId, tryNumber: 1 },
        { state: 'success', returnValueJson: '{"rows":3}' },
        1_040_000,
      ),
    ).toBe(true);
    const done = await taskInstance(db, id);
    expect(done).toMatchObject({ state: 'success', try_number: 1, next_method: null, next_kwargs: null, worker_job_id: null });
    expect(JSON.parse(done.return_value!)).toEqual({ rows: 3 });
    expect(new Date(done.start_date!).getTime()).toBe(1_000_000);
    expect(new Date(done.end_date!).getTime()).toBe(1_040_000);
  });

  it('every state a task instance enters is in its history, written by the database with the transition: when, the try, the trigger or the worker', async () => {
    const db = await database();
    const storage = openStores(db);
    const me = await worker(storage);
    const id = await createTaskInstance(db, { state: 'scheduled' });
    const other = await createTaskInstance(db, { state: 'scheduled' });
    await storage.taskInstances.claimTaskInstances(me, 2, 1_000_000);
    await storage.taskInstances.startTaskInstance(id, me.jobId, null, 1_000_000);
    await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }), 1_010_000);
    const triggerId = (await taskInstance(db, id)).trigger_id!;
    await submitEvents(storage, [{ triggerId, payloadJson: '"ok"' }], 1_020_000);
    await storage.taskInstances.claimTaskInstances(me, 1, 1_030_000);
    await storage.taskInstances.startTaskInstance(id, me.jobId, null, 1_030_000);
    // A write that leaves the state as it is records nothing.
    await db.db.updateTable('task_instance').set({ priority_weight: 5 }).where('id', '=', id).execute();
    await storage.taskInstances.finishTaskInstance(id, { workerJobId: me.jobId, tryNumber: 1 }, { state: 'success', returnValueJson: null }, 1_040_000);
    const changes = await storage.taskInstances.listStateChanges([id, other]);
    const mine = changes.filter((change) => change.taskInstanceId === id);
    expect(mine.map((change) => [change.state, change.tryNumber])).toEqual([
      ['scheduled', 0],
      ['queued', 0],
      ['running', 1],
      ['deferred', 1],
      ['scheduled', 1],
      ['queued', 1],
      ['running', 1],
      ['success', 1],
    ]);
    expect(mine.slice(1).map((change) => change.at)).toEqual([1_000_000, 1_000_000, 1_010_000, 1_020_000, 1_030_000, 1_030_000, 1_040_000]);
    expect(mine[3]).toMatchObject({ triggerId, workerJobId: null });
    expect(mine[1]).toMatchObject({ triggerId: null, workerJobId: me.jobId });
    // Claimed in the same statement as the first: its own rows.
    expect(changes.filter((change) => change.taskInstanceId === other).map((change) => change.state)).toEqual(['scheduled', 'queued']);
  });

  it('a retry starts a new try; a finish or start from a worker that no longer holds the task instance changes nothing', async () => {
    const db = await database();
    const storage = openStores(db);
    const me = await worker(storage);
    const other = await worker(storage, 'other-host');
    const id = await createTaskInstance(db, { state: 'scheduled' });
    await storage.taskInstances.claimTaskInstances(me, 1);
    expect(await storage.taskInstances.startTaskInstance(id, other.jobId, null)).toBeNull();
    await storage.taskInstances.startTaskInstance(id, me.jobId, null);
    expect(await storage.taskInstances.finishTaskInstance(id, { workerJobId: other.jobId, tryNumber: 1 }, { state: 'success', returnValueJson: null })).toBe(
      false,
    );
    expect((await taskInstance(db, id)).state).toBe('running');

    expect(await storage.taskInstances.finishTaskInstance(id, { workerJobId: me.jobId, tryNumber: 1 }, { state: 'up_for_retry', readyAt: 5_000 })).toBe(true);
    const waiting = await taskInstance(db, id);
    expect(waiting).toMatchObject({ state: 'up_for_retry', try_number: 1, end_date: null });
    expect(new Date(waiting.ready_at!).getTime()).toBe(5_000);
    await db.db.updateTable('task_instance').set({ state: 'scheduled' }).where('id', '=', id).execute();
    await storage.taskInstances.claimTaskInstances(me, 1);
    expect(await storage.taskInstances.startTaskInstance(id, me.jobId, null)).toMatchObject({ tryNumber: 2, nextMethod: null });
  });

  it.each(['another worker', 'the same worker'] as const)(
    'a worker whose try was reaped and retried on %s writes nothing of the old try: no outcome, deferral or stop',
    async (retriedOn) => {
      const db = await database();
      const storage = openStores(db);
      const me = await worker(storage);
      const other = await worker(storage, 'other-host');
      const id = await createTaskInstance(db, { state: 'scheduled' });
      await db.db.updateTable('task_instance').set({ max_tries: 3 }).where('id', '=', id).execute();
      await storage.taskInstances.claimTaskInstances(me, 1);
      const oldTry = { workerJobId: me.jobId, tryNumber: (await storage.taskInstances.startTaskInstance(id, me.jobId, null))!.tryNumber };

      // I was found dead (a pause past the zombie threshold, say): the scheduler retries the try.
      const stale = Date.now() + 60_000;
      expect(await storage.taskInstances.reapZombieTaskInstances([me.jobId], stale, async () => stale)).toMatchObject({ retried: 1 });
      expect(await storage.taskInstances.scheduleReadyTaskInstances(stale)).toBe(1);
      const retrier = retriedOn === 'another worker' ? other : me;
      await storage.taskInstances.claimTaskInstances(retrier, 1);
      const newTry = { workerJobId: retrier.jobId, tryNumber: (await storage.taskInstances.startTaskInstance(id, retrier.jobId, null))!.tryNumber };
      expect(newTry.tryNumber).toBe(oldTry.tryNumber + 1);
      const retried = await taskInstance(db, id);

      // The old try's code ends now; nothing it writes lands on the try that replaced it.
      expect(await storage.taskInstances.finishTaskInstance(id, oldTry, { state: 'success', returnValueJson: '"old"' })).toBe(false);
      await expect(
        storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }), Date.now(), oldTry),
      ).rejects.toThrow(
        `task instance ${id} is no longer running try ${oldTry.tryNumber} on worker ${me.jobId} (it is running, try ${newTry.tryNumber}, on worker ${retrier.jobId})`,
      );
      await db.db.updateTable('task_instance').set({ stop_request: 'failed' }).where('id', '=', id).execute();
      expect(await storage.taskInstances.carryOutStopRequest(id, oldTry)).toBe(null);
      await db.db.updateTable('task_instance').set({ stop_request: null }).where('id', '=', id).execute();
      expect(await taskInstance(db, id)).toEqual(retried);
      expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);

      // The new try's own writes do.
      await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }), Date.now(), newTry);
      expect(await taskInstance(db, id)).toMatchObject({ state: 'deferred', try_number: newTry.tryNumber, worker_job_id: null });
    },
  );

  it.runIf(dialect === 'postgres')('workers claiming at once on separate connections never claim the same task instance', async () => {
    const db = await database();
    const ids: number[] = [];
    for (let i = 0; i < 200; i++) ids.push(await createTaskInstance(db, { state: 'scheduled' }));
    const connections = [0, 1, 2, 3].map(() => openDatabase(db.url, { poolSize: 2 }));
    open.push(...connections);
    const workers = await Promise.all(connections.map((c, i) => worker(openStores(c), `host-${i}`)));
    const claimedBy = await Promise.all(
      connections.map(async (connection, i) => {
        const storage = openStores(connection);
        const mine: number[] = [];
        for (let round = 0; round < 20; round++) mine.push(...(await storage.taskInstances.claimTaskInstances(workers[i]!, 7)).map((ti) => ti.id));
        return mine;
      }),
    );
    const all = claimedBy.flat();
    expect(new Set(all).size).toBe(all.length);
    expect(all.sort((a, b) => a - b)).toEqual(ids);
    expect(claimedBy.filter((mine) => mine.length > 0).length).toBeGreaterThan(1);
    const rows = await db.db.selectFrom('task_instance').select(['id', 'worker_job_id']).execute();
    for (const row of rows) {
      const owner = claimedBy.findIndex((mine) => mine.includes(row.id));
      expect(row.worker_job_id).toBe(workers[owner]!.jobId);
    }
  });

  it('marks task instances success or failed whatever they do: a waiting one ends now and its trigger goes, a running one gets a stop request, one already so is left', async () => {
    const db = await database();
    const storage = openStores(db);
    const none = await createTaskInstance(db, {});
    await db.db.updateTable('task_instance').set({ state: null }).where('id', '=', none).execute();
    const scheduled = await createTaskInstance(db, { state: 'scheduled' });
    const retrying = await createTaskInstance(db, { state: 'up_for_retry' });
    const failed = await createTaskInstance(db, { state: 'failed' });
    const succeeded = await createTaskInstance(db, { state: 'success' });
    const running = await createTaskInstance(db, { state: 'running' });
    const deferred = await createTaskInstance(db, { state: 'running' });
    await storage.taskInstances.deferTaskInstance(deferred, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume', timeout: 600 }), 1_000_000);
    const triggerId = (await taskInstance(db, deferred)).trigger_id!;

    const result = await storage.taskInstances.markTaskInstances([none, scheduled, retrying, failed, succeeded, running, deferred], 'success', 2_000_000);
    expect(result).toEqual({ marked: 5, stopRequested: 1, deletedTriggers: 1 });
    for (const id of [none, scheduled, retrying, failed, deferred]) {
      const row = await taskInstance(db, id);
      expect(row).toMatchObject({ state: 'success', trigger_id: null, trigger_timeout: null, next_method: null, stop_request: null });
      expect(new Date(row.end_date!).getTime()).toBe(2_000_000);
    }
    expect(await taskInstance(db, succeeded)).toMatchObject({ state: 'success', end_date: null });
    expect(await taskInstance(db, running)).toMatchObject({ state: 'running', stop_request: 'success' });
    expect(await db.db.selectFrom('trigger').select('id').where('id', '=', triggerId).executeTakeFirst()).toBeUndefined();
    // The history has the change, as for any transition.
    expect((await storage.taskInstances.listStateChanges([deferred])).map((change) => change.state)).toEqual(['running', 'deferred', 'success']);

    // Marked failed: the success ones end failed; the running one's request becomes failed.
    expect(await storage.taskInstances.markTaskInstances([succeeded, running], 'failed', 3_000_000)).toEqual({
      marked: 1,
      stopRequested: 1,
      deletedTriggers: 0,
    });
    expect(await taskInstance(db, running)).toMatchObject({ state: 'running', stop_request: 'failed' });
    expect((await taskInstance(db, succeeded)).state).toBe('failed');
    expect(await storage.taskInstances.markTaskInstances([], 'failed')).toEqual({ marked: 0, stopRequested: 0, deletedTriggers: 0 });
  });

  it('keeps an audit log: entries read back newest first, a page at a time', async () => {
    const db = await database();
    const storage = openStores(db);
    const cleared = {
      actor: 'alice',
      source: 'web',
      address: '10.0.0.7',
      action: 'clear',
      dagId: 'etl',
      runId: 'r1',
      taskInstanceId: 12,
      details: { task_ids: ['a'] },
      outcome: 'cleared 1',
    } satisfies AuditEntry;
    const sent = { actor: 'bob', source: 'cli', address: 'host-1', action: 'signal', details: { key: 'k', version: 3 }, outcome: 'sent' } satisfies AuditEntry;
    const first = await storage.audit.appendAuditEntry(cleared, 1_000_000);
    const second = await storage.audit.appendAuditEntry(sent, 2_000_000);
    expect(second).toBeGreaterThan(first);
    // Read back as written, what was not given null.
    expect(await storage.audit.listAuditEntries({ limit: 10 })).toEqual([
      { id: second, at: 2_000_000, dagId: null, runId: null, taskInstanceId: null, ...sent },
      { id: first, at: 1_000_000, ...cleared },
    ]);
    expect((await storage.audit.listAuditEntries({ limit: 1, before: second })).map((entry) => entry.id)).toEqual([first]);
    expect(await storage.audit.listAuditEntries({ limit: 10, before: first })).toEqual([]);
  });
});
