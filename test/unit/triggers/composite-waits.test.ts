// Composite waits (anyOf, allOf) with an in-process triggerer on both dialects, judged by the
// rows: the task instance resumes once with which member fired (anyOf) or every event (allOf);
// members are ordinary trigger rows shared with identical waits; an allOf keeps each member's
// outcome as it fires; the losers nothing else needs are deleted and stopped; a member's failure,
// the task's timeout and a clear end the whole wait and leave no row behind.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  allOf,
  anyOf,
  BaseSensorOperator,
  isTaskDeferred,
  TaskDeferred,
  type BaseTrigger,
  InvalidTriggerArgumentError,
  resumeTaskInstance,
  type RuntimeContext,
  SignalTrigger,
} from '../../../src/index.ts';
import { DateTimeTrigger } from '../../../triggers/index.ts';
import { TRIGGER_FAILURE_METHOD } from '../../../src/internals.ts';
import { openStores } from '../../../src/storage/index.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { createTaskInstance, migratedDatabase, submitEvents, taskInstance, waitFor, type TestDatabase } from '../../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../../support/in-process-triggerer.ts';
import { Keyring } from '../../../src/database/encryption/keyring.ts';

afterAll(dropTestDatabases);

describe('anyOf and allOf as written', () => {
  it('nest, serialize as a tree of their members, and refuse an empty or non-trigger member where defer() is called', () => {
    const wait = anyOf([new t.DelayTrigger({ ms: 1 }), allOf([new t.NeverTrigger({}), new t.DelayTrigger({ ms: 2 })])]);
    expect(wait.serialize()).toEqual({
      classpath: 'deferflow.triggers.AnyOf',
      kwargs: {
        members: [
          { classpath: 'test.DelayTrigger', kwargs: { ms: 1 } },
          {
            classpath: 'deferflow.triggers.AllOf',
            kwargs: {
              members: [
                { classpath: 'test.NeverTrigger', kwargs: {} },
                { classpath: 'test.DelayTrigger', kwargs: { ms: 2 } },
              ],
            },
          },
        ],
      },
    });
    expect(() => anyOf([])).toThrow(InvalidTriggerArgumentError);
    expect(() => allOf([{} as BaseTrigger])).toThrow(/member 0 is not a trigger/);
    expect(() => anyOf(Array.from({ length: 101 }, (_, ms) => new t.DelayTrigger({ ms })))).toThrow(/at most 100/);
  });
});

describe.each(testDialects)('composite waits on %s', (dialect) => {
  const open: { databases: TestDatabase[]; triggerers: TestTriggerer[] } = { databases: [], triggerers: [] };
  afterEach(async () => {
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    return db;
  };
  const triggerer = async (db: TestDatabase) => {
    const tr = await startTriggerer(db);
    open.triggerers.push(tr);
    return tr;
  };
  const scratch = () => mkdtempSync(path.join(os.tmpdir(), 'deferflow-composite-'));
  const defer = async (db: TestDatabase, trigger: BaseTrigger, timeout?: number) => {
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume', kwargs: { note: 'kept' }, timeout }));
    return id;
  };
  const resumedWith = async (db: TestDatabase, id: number) => {
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: `task instance ${id} resumed` });
    return (await taskInstance(db, id)).next_event;
  };
  const rows = async (db: TestDatabase) => ({
    triggers: (await db.db.selectFrom('trigger').select('classpath').orderBy('id').execute()).map((row) => row.classpath),
    members: (await db.db.selectFrom('trigger_member').select(['member_index', 'outcome']).orderBy('member_index').execute()).length,
  });
  const noRowsLeft = (db: TestDatabase) =>
    waitFor(
      async () => {
        const left = await rows(db);
        return left.triggers.length === 0 && left.members === 0;
      },
      { what: 'no trigger or member rows left' },
    );

  it('anyOf resumes once with the member that fired and its event; the loser is deleted and stopped (cleanup runs)', async () => {
    const db = await database();
    const dir = scratch();
    const file = path.join(dir, 'loser.log');
    writeFileSync(file, '');
    const id = await defer(db, anyOf([new t.NeverTrigger({ file, tag: 'loser' }), new t.DelayTrigger({ ms: 300 })]));
    expect(await rows(db)).toEqual({ triggers: ['deferflow.triggers.AnyOf', 'test.NeverTrigger', 'test.DelayTrigger'], members: 2 });
    await triggerer(db);
    expect(await resumedWith(db, id)).toEqual({ index: 1, event: { slept: 300 } });
    expect((await taskInstance(db, id)).next_kwargs).toEqual({ note: 'kept' });
    await noRowsLeft(db);
    await waitFor(() => readFileSync(file, 'utf8').includes('cleanup loser'), { what: 'the loser stopped, its cleanup run' });
  });

  it('allOf keeps each member outcome as it fires, and resumes when the last fires, with every event in order', async () => {
    const db = await database();
    const dir = scratch();
    const gates = [path.join(dir, 'gate-0'), path.join(dir, 'gate-1')];
    const id = await defer(db, allOf([new t.GateTrigger({ gate: gates[0]!, n: 0 }), new t.GateTrigger({ gate: gates[1]!, n: 1 })]));
    await triggerer(db);
    writeFileSync(gates[1]!, '');
    await waitFor(async () => (await db.db.selectFrom('trigger_member').select('outcome').where('member_index', '=', 1).executeTakeFirst())?.outcome != null, {
      what: 'the second member outcome kept',
    });
    expect((await taskInstance(db, id)).state).toBe('deferred');
    // The fired member's row goes (nothing waits on it); the other and the composite stay.
    await waitFor(async () => (await rows(db)).triggers.length === 2, { what: 'the fired member row deleted' });
    expect((await rows(db)).triggers).toEqual(['deferflow.triggers.AllOf', 'test.GateTrigger']);
    writeFileSync(gates[0]!, '');
    expect(await resumedWith(db, id)).toEqual({ events: [{ n: 0 }, { n: 1 }] });
    await noRowsLeft(db);
  });

  it('members are shared with identical waits: one row for one wait, kept while a plain wait still needs it', async () => {
    const db = await database();
    const dir = scratch();
    const file = path.join(dir, 'shared.log');
    writeFileSync(file, '');
    const plain = await defer(db, new t.NeverTrigger({ file, tag: 'shared' }));
    const first = await defer(db, anyOf([new t.NeverTrigger({ file, tag: 'shared' }), new t.DelayTrigger({ ms: 200 })]));
    // Identical composite waits share the composite row too.
    const second = await defer(db, anyOf([new t.NeverTrigger({ file, tag: 'shared' }), new t.DelayTrigger({ ms: 200 })]));
    expect(await rows(db)).toEqual({ triggers: ['test.NeverTrigger', 'deferflow.triggers.AnyOf', 'test.DelayTrigger'], members: 2 });
    await triggerer(db);
    expect(await resumedWith(db, first)).toEqual({ index: 1, event: { slept: 200 } });
    expect(await resumedWith(db, second)).toEqual({ index: 1, event: { slept: 200 } });
    await waitFor(async () => (await rows(db)).triggers.length === 1, { what: 'the composite and its fired member deleted' });
    expect(await rows(db)).toEqual({ triggers: ['test.NeverTrigger'], members: 0 });
    expect((await taskInstance(db, plain)).state).toBe('deferred');
    // The shared member ran once and was never stopped: the plain wait still has it.
    expect(readFileSync(file, 'utf8').trim().split('\n')).toEqual([expect.stringMatching(/^start shared /)]);
  });

  it('a signal or a deadline, whichever comes first: the signal resumes the task and the timer row goes', async () => {
    const db = await database();
    const id = await defer(
      db,
      anyOf([new SignalTrigger({ key: 'approved', sinceVersion: 0 }), new DateTimeTrigger({ moment: new Date(Date.now() + 3_600_000) })]),
    );
    await triggerer(db);
    await waitFor(
      async () =>
        (await taskInstance(db, id)).state === 'deferred' &&
        (await db.db.selectFrom('trigger').select('triggerer_id').where('triggerer_id', 'is', null).execute()).length === 0,
      {
        what: 'every row claimed',
      },
    );
    await openStores(db).signals.sendSignal('approved', '"yes"');
    expect(await resumedWith(db, id)).toMatchObject({ index: 0, event: { key: 'approved', version: 1, value: 'yes' } });
    await noRowsLeft(db);
  });

  it('a composite one of whose pending members lost its row (a bug) is a stranded wait: the reconciler fails it with DF_DEFERRAL_STRANDED', async () => {
    const db = await database();
    const storage = openStores(db);
    const healthy = await defer(db, anyOf([new t.NeverTrigger({ tag: 'a' }), new t.NeverTrigger({ tag: 'b' })]));
    const broken = await defer(db, anyOf([new t.NeverTrigger({ tag: 'c' }), new t.NeverTrigger({ tag: 'd' })]));
    expect(await storage.triggers.failStrandedDeferrals(Date.now())).toBe(0);
    const lost = await db.db
      .selectFrom('trigger_member')
      .innerJoin('task_instance', 'task_instance.trigger_id', 'trigger_member.composite_id')
      .select('trigger_member.member_id')
      .where('task_instance.id', '=', broken)
      .where('trigger_member.member_index', '=', 1)
      .executeTakeFirstOrThrow();
    await db.db.deleteFrom('trigger').where('id', '=', lost.member_id).execute();
    expect(await storage.triggers.failStrandedDeferrals(Date.now())).toBe(1);
    expect(await taskInstance(db, broken)).toMatchObject({ state: 'scheduled', next_kwargs: { code: 'DF_DEFERRAL_STRANDED' } });
    expect((await taskInstance(db, healthy)).state).toBe('deferred');
  });

  it('a sensor in deferrable mode waits on a composite of its own (its trigger()), and resumes done when it fires', async () => {
    class FirstOfTwoSensor extends BaseSensorOperator {
      poke(): boolean {
        return false;
      }
      override trigger(): BaseTrigger {
        return anyOf([new t.NeverTrigger({ tag: 'sensor' }), new t.DelayTrigger({ ms: 100 })]);
      }
    }
    const db = await database();
    const sensor = new FirstOfTwoSensor({ taskId: 'first_of_two', mode: 'deferrable', timeout: 60 });
    const context = { log: { warn() {} }, signal: new AbortController().signal } as unknown as RuntimeContext;
    const thrown = await sensor.execute(context).catch((error: unknown) => error);
    if (!isTaskDeferred(thrown)) throw new Error(`expected the sensor to defer, got ${String(thrown)}`);
    expect(thrown.serializedTrigger.classpath).toBe('deferflow.triggers.AnyOf');
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(id, thrown);
    await triggerer(db);
    expect(await resumedWith(db, id)).toEqual({ index: 1, event: { slept: 100 } });
    await db.db.updateTable('task_instance').set({ state: 'running' }).where('id', '=', id).execute();
    // Done: the sensor's resume ends the task (no poke value to return).
    expect(await resumeTaskInstance(db, id, sensor, context)).toBeUndefined();
  });

  it('with encryption on, a member outcome kept for an allOf is sealed, and the event the task resumes with opens with the key', async () => {
    const db = await database();
    const sealed = openStores({ ...db, keyring: Keyring.fromEntries([Keyring.generateEntry('k1')], 'test') });
    const id = await createTaskInstance(db);
    const wait = allOf([new t.NeverTrigger({ tag: 'first' }), new t.NeverTrigger({ tag: 'second' })]);
    await sealed.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: wait, method: 'resume' }));
    const members = await db.db.selectFrom('trigger_member').select(['member_index', 'member_id']).orderBy('member_index').execute();
    await submitEvents(sealed, [{ triggerId: members[0]!.member_id, payloadJson: '{"secret":"first"}' }]);
    const kept = await db.db.selectFrom('trigger_member').select('outcome').where('member_index', '=', 0).executeTakeFirstOrThrow();
    expect(Keyring.sealedWith(kept.outcome!)).toBe('k1');
    expect(Keyring.textForm(kept.outcome!)).not.toContain('secret');
    await submitEvents(sealed, [{ triggerId: members[1]!.member_id, payloadJson: '{"secret":"second"}' }]);
    const resumed = await sealed.taskInstances.readResumeState(id);
    expect(JSON.parse(resumed!.nextKwargsJson!)).toEqual({ event: { events: [{ secret: 'first' }, { secret: 'second' }] } });
  });

  it('nested: anyOf([allOf([a, b]), never]) resumes with the inner events under the index of the allOf', async () => {
    const db = await database();
    const id = await defer(db, anyOf([allOf([new t.DelayTrigger({ ms: 50 }), new t.DelayTrigger({ ms: 150 })]), new t.NeverTrigger({})]));
    await triggerer(db);
    expect(await resumedWith(db, id)).toEqual({ index: 0, event: { events: [{ slept: 50 }, { slept: 150 }] } });
    await noRowsLeft(db);
  });

  it("a member's failure fails the whole wait: the task resumes at the failure marker with that member's error", async () => {
    const db = await database();
    const id = await defer(db, allOf([new t.ThrowingTrigger({ tag: 'bad member' }), new t.NeverTrigger({})]));
    await triggerer(db);
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the failure' });
    const row = await taskInstance(db, id);
    expect(row.next_method).toBe(TRIGGER_FAILURE_METHOD);
    expect(row.next_kwargs).toMatchObject({ error: 'Error: boom from bad member', reason: 'trigger_failure' });
    await noRowsLeft(db);
  });

  it("the task's timeout bounds the whole wait; a clear ends it too, stopping the members (onKill runs)", async () => {
    const db = await database();
    const dir = scratch();
    const file = path.join(dir, 'members.log');
    writeFileSync(file, '');
    const timedOut = await defer(db, allOf([new t.DelayTrigger({ ms: 60_000 }), new t.NeverTrigger({ file, tag: 'timed' })]), 1);
    await triggerer(db);
    await waitFor(async () => (await taskInstance(db, timedOut)).state === 'scheduled', { what: 'the timeout', timeoutMs: 10_000 });
    expect((await taskInstance(db, timedOut)).next_kwargs).toMatchObject({ reason: 'timeout' });
    await noRowsLeft(db);

    const cleared = await defer(db, anyOf([new t.NeverTrigger({ file, tag: 'cleared' }), new t.DelayTrigger({ ms: 60_000 })]));
    await waitFor(() => readFileSync(file, 'utf8').includes('start cleared'), { what: 'the member running' });
    await openStores(db).taskInstances.clearTaskInstances([{ id: cleared, retries: 0 }]);
    await noRowsLeft(db);
    await waitFor(() => readFileSync(file, 'utf8').includes('kill cleared'), { what: 'the member stopped by the clear' });
  });
});
