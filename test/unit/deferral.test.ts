import { DateTime, Duration } from 'luxon';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  BaseOperator,
  NotJsonError,
  TaskDeferralError,
  TaskDeferralTimeout,
  TaskDeferred,
  TaskInstanceStateError,
  UnknownNextMethodError,
  openDatabase,
  resumeTaskInstance,
  type TaskContext,
} from '../../src/index.ts';
import { openStores } from '../../src/storage/index.ts';
import { DateTimeTrigger, TimeDeltaTrigger } from '../../triggers/index.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, parsePlain, taskInstance, type TestDatabase, waitFor, submitEvents } from '../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

/** An operator that waits for a moment, then reports what it was resumed with. */
class WaitThenReport extends BaseOperator {
  constructor(private readonly moment: string) {
    super();
  }
  execute(): never {
    return this.defer({
      trigger: new DateTimeTrigger({ moment: this.moment }),
      method: 'report',
      kwargs: { attempt: 1 },
      timeout: Duration.fromObject({ minutes: 5 }),
    });
  }
  report(context: TaskContext, event: unknown, kwargs: Record<string, unknown>) {
    return { ti: context.taskInstance.id, event, kwargs };
  }
}

const contextFor = (id: number): TaskContext => ({
  taskInstance: { id, dagId: 'test_dag', taskId: 't', runId: 'manual__1', mapIndex: -1, tryNumber: 1 },
});

describe.each(testDialects)('deferral on %s', (dialect) => {
  const opened: { databases: TestDatabase[]; triggerers: TestTriggerer[] } = { databases: [], triggerers: [] };
  afterEach(async () => {
    await Promise.all(opened.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(opened.databases.splice(0).map((db) => db.close()));
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    opened.databases.push(db);
    return db;
  };
  const capture = (fn: () => unknown): TaskDeferred => {
    try {
      fn();
    } catch (thrown) {
      if (thrown instanceof TaskDeferred) return thrown;
      throw thrown;
    }
    throw new Error('expected the operator to defer');
  };

  it('runs an operator end to end: defer frees the task, the triggerer fires, the task resumes at next_method with the event', async () => {
    const db = await database();
    const id = await createTaskInstance(db, { priorityWeight: 3 });
    const moment = DateTime.utc().plus({ milliseconds: 300 }).toISO()!;
    const operator = new WaitThenReport(moment);
    const deferral = capture(() => operator.execute());
    const deferredAt = Date.now();
    await openStores(db).taskInstances.deferTaskInstance(id, deferral, deferredAt);

    const deferred = await taskInstance(db, id);
    expect(deferred).toMatchObject({ state: 'deferred', next_method: 'report', next_kwargs: { attempt: 1 }, worker_job_id: null });
    expect(new Date(deferred.trigger_timeout!).getTime()).toBe(deferredAt + 5 * 60_000);
    const trigger = await db.db.selectFrom('trigger').selectAll().where('id', '=', deferred.trigger_id!).executeTakeFirstOrThrow();
    expect(trigger).toMatchObject({ classpath: 'deferflow.triggers.DateTimeTrigger', priority_weight: 3, triggerer_id: null });
    expect(new Date(trigger.created_at).getTime()).toBe(deferredAt);
    expect(parsePlain(trigger.kwargs)).toEqual({ moment: new DateTimeTrigger({ moment }).moment });
    // The wait is recorded for the try's log: a try not started yet (0) waits as try 1.
    const waits = await db.db.selectFrom('trigger_wait').selectAll().where('task_instance_id', '=', id).execute();
    expect(waits.map((wait) => ({ ...wait, waited_from: new Date(wait.waited_from).getTime() }))).toEqual([
      { task_instance_id: id, try_number: 1, trigger_id: trigger.id, waited_from: deferredAt },
    ]);

    opened.triggerers.push(await startTriggerer(db));
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the event' });
    expect(Date.now()).toBeGreaterThanOrEqual(new DateTimeTrigger({ moment }).momentMs);
    const result = await resumeTaskInstance(db, id, operator, contextFor(id));
    expect(result).toEqual({ ti: id, event: new DateTimeTrigger({ moment }).moment, kwargs: { attempt: 1 } });
  });

  it('resuming a failed or timed-out deferral raises TaskDeferralError / TaskDeferralTimeout with the trigger error', async () => {
    const db = await database();
    const storage = openStores(db);
    const operator = new WaitThenReport(DateTime.utc().toISO()!);
    const failedId = await createTaskInstance(db);
    const failed = await storage.taskInstances.deferTaskInstance(
      failedId,
      new TaskDeferred({ trigger: new t.ThrowingTrigger({ tag: 'resume' }), method: 'report' }),
    );
    const timedId = await createTaskInstance(db);
    await storage.taskInstances.deferTaskInstance(timedId, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'report', timeout: 0.2 }));
    opened.triggerers.push(await startTriggerer(db));
    await waitFor(async () => (await taskInstance(db, failedId)).state === 'scheduled' && (await taskInstance(db, timedId)).state === 'scheduled');

    const failure = await resumeTaskInstance(db, failedId, operator, contextFor(failedId)).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(TaskDeferralError);
    expect(failure).not.toBeInstanceOf(TaskDeferralTimeout);
    expect((failure as TaskDeferralError).message).toContain('boom from resume');
    expect((failure as TaskDeferralError).triggerTraceback).toContain('ThrowingTrigger');
    expect((failure as TaskDeferralError).code).toBe('DF_TASK_DEFERRAL');
    expect(failed.reusedTrigger).toBe(false);

    const timeout = await resumeTaskInstance(db, timedId, operator, contextFor(timedId)).catch((e: unknown) => e);
    expect(timeout).toBeInstanceOf(TaskDeferralTimeout);
    expect((timeout as TaskDeferralTimeout).code).toBe('DF_TASK_DEFERRAL_TIMEOUT');
  });

  it('refuses to resume at a method the operator does not have', async () => {
    const db = await database();
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.ImmediateTrigger({}), method: 'nope' }));
    const [trigger] = await db.db.selectFrom('trigger').select('id').execute();
    await submitEvents(openStores(db), [{ triggerId: trigger!.id, payloadJson: '1' }]);
    await expect(resumeTaskInstance(db, id, new WaitThenReport('2030-01-01T00:00:00Z'), contextFor(id))).rejects.toThrow(UnknownNextMethodError);
  });

  it('refuses non-JSON kwargs at defer time, naming the path, and a task instance that cannot defer', async () => {
    const db = await database();
    const trigger = new t.ImmediateTrigger({});
    const refuse = (kwargs: unknown) => () => new TaskDeferred({ trigger, method: 'resume', kwargs: kwargs as never });
    expect(refuse({ when: new Date() })).toThrow(/next_kwargs\.when: a Date/);
    expect(refuse({ nested: { f: () => 1 } })).toThrow(/next_kwargs\.nested\.f: a function is not JSON/);
    expect(refuse({ list: [1, undefined] })).toThrow(/next_kwargs\.list\[1\]: undefined is not JSON/);
    expect(refuse({ n: Number.NaN })).toThrow(NotJsonError);
    expect(refuse({ m: new Map() })).toThrow(/an instance of Map/);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(refuse(cyclic)).toThrow(/cycle/);
    expect(refuse({ event: 1 })).toThrow(/"event" is reserved/);
    expect(() => new TaskDeferred({ trigger: Object.assign(new t.ImmediateTrigger({}), { kwargs: { big: 10n } }) as never, method: 'resume' })).toThrow(
      /test\.ImmediateTrigger kwargs\.big: a bigint/,
    );

    const done = await createTaskInstance(db, { state: 'success' });
    await expect(openStores(db).taskInstances.deferTaskInstance(done, new TaskDeferred({ trigger, method: 'resume' }))).rejects.toThrow(TaskInstanceStateError);
    await expect(openStores(db).taskInstances.deferTaskInstance(done, new TaskDeferred({ trigger, method: 'resume' }))).rejects.toThrow(
      `task instance ${done} is success; only running, queued, scheduled task instances can defer`,
    );
    await expect(openStores(db).taskInstances.deferTaskInstance(done + 1000, new TaskDeferred({ trigger, method: 'resume' }))).rejects.toThrow(
      `task instance ${done + 1000} does not exist`,
    );
    expect((await taskInstance(db, done)).state).toBe('success');
    expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);
  });

  it('identical waits share one trigger row, raised to the highest priority; deduplicate:false opts out', async () => {
    const db = await database();
    const storage = openStores(db);
    const moment = '2031-03-04T05:06:07.000Z';
    const defer = async (trigger: import('../../src/index.ts').BaseTrigger, priorityWeight = 1, deduplicate = true) =>
      storage.taskInstances.deferTaskInstance(await createTaskInstance(db, { priorityWeight }), new TaskDeferred({ trigger, method: 'resume', deduplicate }));
    const first = await defer(new DateTimeTrigger({ moment }));
    const sameMomentOtherSpelling = await defer(new DateTimeTrigger({ moment: DateTime.fromISO(moment).setZone('UTC+2') }), 7);
    const other = await defer(new DateTimeTrigger({ moment: '2031-03-04T05:06:08Z' }));
    const optedOut = await defer(new DateTimeTrigger({ moment }), 1, false);
    expect(first.reusedTrigger).toBe(false);
    expect(other.triggerId).not.toBe(first.triggerId);
    expect(optedOut.triggerId).not.toBe(first.triggerId);
    // A moment is an instant: the same one given in another zone shares the row.
    expect(sameMomentOtherSpelling).toEqual({ triggerId: first.triggerId, reusedTrigger: true });
    const inNewYork = await defer(new DateTimeTrigger({ moment: DateTime.fromISO(moment).setZone('America/New_York') }));
    const withOffset = await defer(new DateTimeTrigger({ moment: '2031-03-04T07:06:07+02:00' }));
    expect([inNewYork.triggerId, withOffset.triggerId]).toEqual([first.triggerId, first.triggerId]);
    const same = await defer(new DateTimeTrigger({ moment: new Date(moment) }), 9);
    expect(same).toEqual({ triggerId: first.triggerId, reusedTrigger: true });
    const row = await db.db.selectFrom('trigger').selectAll().where('id', '=', first.triggerId).executeTakeFirstOrThrow();
    expect(row.priority_weight).toBe(9);
    expect(parsePlain(row.kwargs)).toEqual({ moment });
    const waiting = await db.db.selectFrom('task_instance').select('id').where('trigger_id', '=', first.triggerId).execute();
    expect(waiting).toHaveLength(5);
    // TimeDeltaTrigger is stored as the absolute moment, so it dedupes with a DateTimeTrigger.
    const delta = new TimeDeltaTrigger({ delta: 3600 });
    const byDelta = await defer(delta);
    const byMoment = await defer(new DateTimeTrigger({ moment: delta.moment }));
    expect(byMoment).toEqual({ triggerId: byDelta.triggerId, reusedTrigger: true });
  });

  it('a deferral that joins a trigger after its event was written, before its row is deleted, gets an event of its own', async () => {
    const db = await database();
    const storage = openStores(db);
    const moment = '2020-06-01T00:00:00.000Z';
    const first = await createTaskInstance(db);
    const { triggerId } = await storage.taskInstances.deferTaskInstance(
      first,
      new TaskDeferred({ trigger: new DateTimeTrigger({ moment }), method: 'resume' }),
    );
    expect(await submitEvents(storage, [{ triggerId, payloadJson: JSON.stringify(moment) }])).toEqual({
      movedTaskInstances: 1,
      endedTaskInstances: 0,
      resolvedComposites: [],
    });

    // The window between the two writes: the row is still there, so the deferral joins it ...
    const late = await createTaskInstance(db);
    const joined = await storage.taskInstances.deferTaskInstance(late, new TaskDeferred({ trigger: new DateTimeTrigger({ moment }), method: 'resume' }));
    expect(joined).toEqual({ triggerId, reusedTrigger: true });
    // ... and the delete that follows leaves it, because the late task instance points at it.
    expect(await storage.triggers.deleteUnusedTriggers([triggerId])).toBe(0);

    opened.triggerers.push(await startTriggerer(db));
    await waitFor(async () => (await taskInstance(db, late)).state === 'scheduled', { what: 'the late task instance scheduled' });
    expect((await taskInstance(db, late)).next_event).toEqual(moment);
    expect((await taskInstance(db, first)).next_event).toEqual(moment);
  });
});

describe('deferral races on postgres', () => {
  const opened: TestDatabase[] = [];
  const triggerers: TestTriggerer[] = [];
  afterEach(async () => {
    await Promise.all(triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(opened.splice(0).map((db) => db.close()));
  });

  it('a deferral joining a trigger while it fires never strands a task instance (concurrent, real connections)', async () => {
    const db = await migratedDatabase('postgres');
    opened.push(db);
    const writers = [0, 1, 2, 3].map(() => openDatabase(db.url, { poolSize: 4 }));
    const tr = await startTriggerer(db, { pollInterval: 0.02, claimsPerLoop: 500 });
    triggerers.push(tr);
    // Every deferral waits on the same already-due moment: the trigger fires as soon as it is
    // claimed, while later deferrals keep joining it.
    const moment = '2020-01-01T00:00:00.000Z';
    const ids: number[] = [];
    let joined = 0;
    await Promise.all(
      writers.map(async (writer, w) => {
        const storage = openStores(writer);
        for (let i = 0; i < 60; i++) {
          const id = await createTaskInstance(writer, { taskId: `w${w}_${i}` });
          ids.push(id);
          const result = await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new DateTimeTrigger({ moment }), method: 'resume' }));
          if (result.reusedTrigger) joined++;
        }
      }),
    );
    await Promise.all(writers.map((w) => w.close()));
    await waitFor(async () => (await db.db.selectFrom('task_instance').select('id').where('state', '=', 'deferred').execute()).length === 0, {
      what: 'no task instance left deferred',
      timeoutMs: 15_000,
    });
    const rows = await db.db.selectFrom('task_instance').select(['state', 'next_event']).where('id', 'in', ids).execute();
    expect(rows).toHaveLength(240);
    for (const row of rows) {
      expect(row.state).toBe('scheduled');
      expect(parsePlain(row.next_event!)).toBe(moment);
    }
    expect(joined).toBeGreaterThan(0);
    // The triggerer logs a write after committing it: its line can reach us after the rows do.
    const moved = () => tr.logs.matching((l) => l.kind === 'event').reduce((s, l) => s + Number(l.moved_task_instances), 0);
    await waitFor(() => moved() >= 240, { what: "the triggerer's event lines for every task instance it moved" });
    expect(moved()).toBe(240);
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').execute()).length === 0, { what: 'the fired triggers deleted' });
  });
});
