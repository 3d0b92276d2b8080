// Bad input, tried systematically (fast-check): arbitrary trigger rows (classpaths and kwargs),
// event payloads, signal keys and values, option values and DAG definitions. None may crash the
// triggerer, corrupt a row, or change a task instance that is not the bad input's own; every
// refusal is a deferflow error with a code, naming what was wrong.
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BaseOperator, Dag, DeferflowError, sendSignal, TaskDeferred } from '../../../src/index.ts';
import { TRIGGERER_OPTIONS } from '../../../src/internals.ts';
import { toDbTime } from '../../../src/database/schema.ts';
import { listSignals } from '../../../src/services/signals/signal-service.ts';
import { openStores } from '../../../src/storage/index.ts';
import { wake } from '../../../src/storage/wake.ts';
import { resolveTriggererOptions } from '../../../src/daemons/triggerer/options.ts';
import { flagOf } from '../../../src/vocabulary/options/option-table.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

/** Some classpaths the triggerer knows (so their constructors meet the bad kwargs), and arbitrary text. */
const classpath = fc.oneof(
  fc.constantFrom(
    'deferflow.triggers.DateTimeTrigger',
    'deferflow.triggers.TimeDeltaTrigger',
    'deferflow.triggers.FileTrigger',
    'test.DelayTrigger',
    'test.BadConstructorTrigger',
  ),
  fc.string({ maxLength: 40 }),
);
const kwargs = fc.oneof(fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }), fc.jsonValue({ maxDepth: 2 }));

/** A refusal as deferflow makes them: its own error, with a code and a message that says something. */
function expectNamedRefusal(error: unknown): void {
  expect(error).toBeInstanceOf(DeferflowError);
  expect((error as DeferflowError).code).toMatch(/^DF_[A-Z_]+$/);
  expect((error as DeferflowError).message.length).toBeGreaterThan(10);
}

describe('bad input without a database', () => {
  it('option values: each resolves or is refused naming its option, never anything else', () => {
    const names = Object.keys(TRIGGERER_OPTIONS).filter((name) => name !== 'databaseUrl' && name !== 'triggerModules') as (keyof typeof TRIGGERER_OPTIONS)[];
    fc.assert(
      fc.property(fc.constantFrom(...names), fc.oneof(fc.string({ maxLength: 20 }), fc.double(), fc.integer(), fc.boolean()), (name, value) => {
        try {
          resolveTriggererOptions({ [name]: value as string }, {});
        } catch (error) {
          expectNamedRefusal(error);
          // The field, or (for the keys file, which the CLI reads too) its flag.
          expect((error as DeferflowError).message).toMatch(new RegExp(`^${name}: |${flagOf(name, TRIGGERER_OPTIONS[name])}`));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('DAG and task ids: a DAG is built or refused naming the bad id', () => {
    class Noop extends BaseOperator {
      execute(): void {}
    }
    fc.assert(
      fc.property(fc.string({ maxLength: 30 }), fc.array(fc.string({ maxLength: 12 }), { maxLength: 4 }), (dagId, taskIds) => {
        try {
          const dag = new Dag({ dagId });
          for (const taskId of taskIds) dag.add(new Noop({ taskId }));
          dag.validate();
        } catch (error) {
          expectNamedRefusal(error);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe.each(testDialects)('bad input on %s', (dialect) => {
  const open: { databases: TestDatabase[]; triggerers: TestTriggerer[] } = { databases: [], triggerers: [] };
  afterEach(async () => {
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });

  it('trigger rows of any classpath and kwargs fail only their own task instances, and the triggerer keeps running', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const storage = openStores(db);
    // Bystanders: waits that must stay exactly as they are.
    const bystanders = await Promise.all(
      [0, 1, 2].map(async (n) => {
        const id = await createTaskInstance(db);
        await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({ n }), method: 'resume' }));
        return id;
      }),
    );
    const before = await Promise.all(bystanders.map((id) => taskInstance(db, id)));
    const tr = await startTriggerer(db);
    open.triggerers.push(tr);

    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(classpath, kwargs), { minLength: 1, maxLength: 6 }), async (rows) => {
        const ids: number[] = [];
        for (const [cp, kw] of rows) {
          const id = await createTaskInstance(db, { state: 'running' });
          // Written as a buggy client would: straight into the rows, unchecked (in one
          // transaction that wakes the triggerer, as a deferral is: a trigger no task instance
          // waits on is deleted, and a triggerer with pushes polls only as a safety net).
          await db.db.transaction().execute(async (trx) => {
            await wake(trx, db.adapter, 'triggerer');
            const trigger = await trx
              .insertInto('trigger')
              .values({ classpath: cp, kwargs: JSON.stringify(kw), created_at: toDbTime(Date.now()), triggerer_id: null, hash: null })
              .returning('id')
              .executeTakeFirstOrThrow();
            await trx
              .updateTable('task_instance')
              .set({ state: 'deferred', trigger_id: trigger.id, next_method: 'resume', next_kwargs: '{}' })
              .where('id', '=', id)
              .execute();
          });
          ids.push(id);
        }
        // Each either fires or fails with a named error; none stays stuck, none takes another down.
        await waitFor(async () => (await Promise.all(ids.map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled' || isRunningWait(ti, tr)), {
          what: 'every bad trigger settled',
          timeoutMs: 15_000,
        });
        for (const id of ids) {
          const ti = await taskInstance(db, id);
          if (ti.state !== 'scheduled') continue;
          if (ti.next_method === '__fail__') {
            expect(ti.next_kwargs!.code).toMatch(/^DF_[A-Z_]+$/);
            expect(String(ti.next_kwargs!.error).length).toBeGreaterThan(10);
          }
        }
        // Stop the waits that legitimately run on (a valid moment far ahead): they are not the point.
        await db.db.updateTable('task_instance').set({ state: 'failed', trigger_id: null }).where('id', 'in', ids).where('state', '=', 'deferred').execute();
      }),
      { numRuns: 15 },
    );

    expect(await Promise.all(bystanders.map((id) => taskInstance(db, id)))).toEqual(before);
    // Still alive: a new, healthy wait fires.
    const healthy = await createTaskInstance(db);
    await storage.taskInstances.deferTaskInstance(healthy, new TaskDeferred({ trigger: new t.DelayTrigger({ ms: 10 }), method: 'resume' }));
    await waitFor(async () => (await taskInstance(db, healthy)).state === 'scheduled', { what: 'a healthy trigger fired after the bad ones' });
    expect(tr.triggerer.jobId).not.toBeNull();
  }, 120_000);

  it('event payloads of any JSON reach their own task instance exactly, or fail it naming what the database cannot store', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const storage = openStores(db);
    const tr = await startTriggerer(db);
    open.triggerers.push(tr);
    const payload = fc.oneof(fc.jsonValue({ maxDepth: 3 }), fc.constantFrom('nul \u0000 inside', { deep: ['half \ud800'] }));
    await fc.assert(
      fc.asyncProperty(fc.array(payload, { minLength: 1, maxLength: 5 }), async (payloads) => {
        const sent = new Map<number, unknown>();
        for (const value of payloads) {
          const id = await createTaskInstance(db);
          // Through the kwargs a trigger's own code would compute its payload from.
          try {
            await storage.taskInstances.deferTaskInstance(
              id,
              new TaskDeferred({ trigger: new t.EchoPayloadTrigger({ payload: value as never }), method: 'resume' }),
            );
          } catch (error) {
            // Text the database cannot store is refused at the deferral already, naming where.
            expectNamedRefusal(error);
            continue;
          }
          sent.set(id, value);
        }
        await waitFor(async () => (await Promise.all([...sent.keys()].map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
          what: 'every echo delivered',
          timeoutMs: 15_000,
        });
        for (const [id, value] of sent) {
          const ti = await taskInstance(db, id);
          if (ti.next_method === '__fail__') {
            expect(ti.next_kwargs!.code).toMatch(/^DF_(NOT_JSON|NOT_STORABLE|OUTCOME_REFUSED)$/);
          } else {
            // JSON's own round trip (-0 is 0).
            expect(ti.next_event, JSON.stringify(value)).toEqual(JSON.parse(JSON.stringify(value ?? null)));
          }
        }
      }),
      { numRuns: 15 },
    );
  }, 120_000);

  it('signal keys and values: each is stored as given or refused naming what was wrong, and nothing else changes', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    await sendSignal(db, 'bystander.key', { kept: true });
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('a.b', 'orders-loaded', 'x'.repeat(250))),
        fc.jsonValue({ maxDepth: 3 }),
        async (key, value) => {
          let version: number | null = null;
          try {
            version = await sendSignal(db, key, value as never);
          } catch (error) {
            expectNamedRefusal(error);
            return;
          }
          const stored = (await listSignals(db, key, { sinceVersion: version - 1 }))[0]!;
          expect(stored.version).toBe(version);
          expect(stored.value).toEqual(JSON.parse(JSON.stringify(value)));
        },
      ),
      { numRuns: 100 },
    );
    expect((await listSignals(db, 'bystander.key')).map((signal) => signal.value)).toEqual([{ kept: true }]);
  }, 120_000);
});

/** A wait that legitimately runs on: still deferred, its trigger running on the triggerer (valid kwargs, a moment ahead). */
function isRunningWait(ti: { state: string | null; trigger_id: number | null }, tr: TestTriggerer): boolean {
  return ti.state === 'deferred' && ti.trigger_id !== null && tr.triggerer.heldTriggerIds.includes(ti.trigger_id);
}
