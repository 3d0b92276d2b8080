/**
 * Composite waits under races, with real triggerer processes on both dialects: members of one
 * composite firing in the same instant on two triggerers resolve each wait exactly once (an allOf
 * with both events, never stuck with each transaction blind to the other's outcome); a triggerer
 * SIGKILLed between two members of an allOf loses nothing (the first outcome is in the database);
 * members firing while their tasks are cleared leave no task resumed after its clear and no row
 * behind.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { allOf, anyOf, TaskDeferred, type BaseTrigger } from '../../src/index.ts';
import { openStores } from '../../src/storage/index.ts';
import { GateTrigger, NeverTrigger } from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, parsePlain, type TestDatabase, waitFor } from '../support/fixtures.ts';
import { spawnTriggerer } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

describe.each(testDialects)('composite waits with triggerer processes on %s', (dialect) => {
  async function setup(name: string) {
    const db = await scratch.database(dialect);
    const dir = scratch.dir(`composite-${name}`);
    return { db, gate: (tag: string) => path.join(dir, `gate-${tag}`), open: (file: string) => writeFileSync(file, '') };
  }

  const triggerer = async (db: TestDatabase, extra: string[] = []) => {
    const proc = spawnTriggerer(['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--heartbeat-interval', '1', ...extra]);
    return { proc, jobId: await proc.waitForJob(20_000) };
  };

  async function deferAll(db: TestDatabase, triggers: readonly BaseTrigger[]): Promise<number[]> {
    const storage = openStores(db);
    const ids: number[] = [];
    for (const trigger of triggers) {
      const id = await createTaskInstance(db);
      await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
      ids.push(id);
    }
    return ids;
  }

  const states = async (db: TestDatabase, ids: readonly number[]) =>
    new Map(
      (await db.db.selectFrom('task_instance').select(['id', 'state', 'next_event']).where('id', 'in', ids).execute()).map((row) => [
        row.id,
        { state: row.state, event: row.next_event === null ? null : parsePlain(row.next_event) },
      ]),
    );
  const rowsLeft = async (db: TestDatabase) => ({
    triggers: Number(
      (
        await db.db
          .selectFrom('trigger')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    ),
    members: Number(
      (
        await db.db
          .selectFrom('trigger_member')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    ),
  });

  /** Trigger rows owned by `owner` (null: unowned). */
  const triggersOf = async (db: TestDatabase, owner: number | null) =>
    Number(
      (
        await db.db
          .selectFrom('trigger')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('triggerer_id', owner === null ? 'is' : '=', owner)
          .executeTakeFirstOrThrow()
      ).n,
    );
  const noRowsLeft = (db: TestDatabase) =>
    waitFor(async () => (await rowsLeft(db)).triggers === 0 && (await rowsLeft(db)).members === 0, { timeoutMs: 20_000, what: 'no rows left' });

  it('members firing in the same instant on two triggerers resolve each composite exactly once: every allOf with both events, every anyOf with one', async () => {
    const { db, gate, open } = await setup('same-instant');
    const G = gate('all');
    const count = 60;
    // Each composite's first member is an older row (a plain wait on the same trigger shares it),
    // claimed by the first triggerer alone; the composites and their second members go to the
    // second: the two members of every composite fire on two triggerers, in two transactions.
    const plain = await deferAll(db, [
      ...Array.from({ length: count }, (_, i) => new GateTrigger({ gate: G, n: i })),
      ...Array.from({ length: count }, (_, i) => new GateTrigger({ gate: G, n: 2000 + i })),
    ]);
    const all = await deferAll(
      db,
      Array.from({ length: count }, (_, i) => allOf([new GateTrigger({ gate: G, n: i }), new GateTrigger({ gate: G, n: 1000 + i })])),
    );
    const any = await deferAll(
      db,
      Array.from({ length: count }, (_, i) => anyOf([new GateTrigger({ gate: G, n: 2000 + i }), new GateTrigger({ gate: G, n: 3000 + i })])),
    );
    const one = await triggerer(db, ['--capacity', String(2 * count)]);
    await waitFor(async () => (await triggersOf(db, one.jobId)) === 2 * count, { what: 'the first triggerer holding the first members' });
    const two = await triggerer(db);
    await waitFor(async () => (await triggersOf(db, two.jobId)) === 4 * count, {
      timeoutMs: 20_000,
      what: 'the second holding the composites and second members',
    });
    const firstMembers = await db.db
      .selectFrom('trigger_member')
      .innerJoin('trigger', 'trigger.id', 'trigger_member.member_id')
      .select('trigger.triggerer_id')
      .where('member_index', '=', 0)
      .execute();
    expect(new Set(firstMembers.map((row) => row.triggerer_id))).toEqual(new Set([one.jobId]));
    open(G);
    await waitFor(async () => [...(await states(db, [...all, ...any])).values()].every((ti) => ti.state === 'scheduled'), {
      timeoutMs: 30_000,
      what: 'every task instance resumed',
    });
    const resumed = await states(db, [...all, ...any]);
    for (const [i, id] of all.entries()) expect(resumed.get(id)!.event, `allOf ${i}`).toEqual({ events: [{ n: i }, { n: 1000 + i }] });
    any.forEach((id, i) => {
      const { index, event } = resumed.get(id)!.event as { index: number; event: { n: number } };
      expect(event, `anyOf ${i}`).toEqual({ n: (index === 0 ? 2000 : 3000) + i });
    });
    expect(new Set([...(await states(db, plain)).values()].map((ti) => ti.state))).toEqual(new Set(['scheduled']));
    await noRowsLeft(db);
    for (const proc of [one.proc, two.proc]) {
      proc.kill('SIGTERM');
      expect(await proc.exit).toEqual({ code: 0, signal: null });
    }
  }, 90_000);

  it('a triggerer SIGKILLed between the two members of an allOf loses nothing: the first outcome was kept, the survivor completes the wait', async () => {
    const { db, gate, open } = await setup('kill-between');
    const [first, second] = [gate('first'), gate('second')];
    const count = 40;
    const ids = await deferAll(
      db,
      Array.from({ length: count }, (_, i) => allOf([new GateTrigger({ gate: first, n: i }), new GateTrigger({ gate: second, n: 100 + i })])),
    );
    const victim = await triggerer(db);
    await waitFor(async () => (await triggersOf(db, victim.jobId)) === count * 3, {
      what: 'the victim holding every row',
    });
    open(first);
    await waitFor(
      async () =>
        Number(
          (
            await db.db
              .selectFrom('trigger_member')
              .select((eb) => eb.fn.countAll().as('n'))
              .where('outcome', 'is not', null)
              .executeTakeFirstOrThrow()
          ).n,
        ) === count,
      { what: 'every first member kept' },
    );
    victim.proc.kill('SIGKILL');
    expect(await victim.proc.exit).toEqual({ code: null, signal: 'SIGKILL' });
    const survivor = await triggerer(db);
    open(second);
    await waitFor(async () => [...(await states(db, ids)).values()].every((ti) => ti.state === 'scheduled'), {
      timeoutMs: 30_000,
      what: 'every task instance resumed',
    });
    const resumed = await states(db, ids);
    for (const [i, id] of ids.entries()) expect(resumed.get(id)!.event, `task ${i}`).toEqual({ events: [{ n: i }, { n: 100 + i }] });
    await noRowsLeft(db);
    survivor.proc.kill('SIGTERM');
    expect(await survivor.proc.exit).toEqual({ code: 0, signal: null });
  }, 90_000);

  it('members firing while their tasks are cleared: no task is left resumed after its clear, and no row is left behind', async () => {
    const { db, gate, open } = await setup('clear-race');
    const G = gate('clear');
    const count = 80;
    const ids = await deferAll(
      db,
      Array.from({ length: count }, (_, i) => anyOf([new GateTrigger({ gate: G, n: i }), new NeverTrigger({ tag: `never-${i}` })])),
    );
    const running = await triggerer(db);
    await waitFor(async () => (await triggersOf(db, null)) === 0, {
      what: 'every row claimed',
    });
    // The gate opens while the clears run, one task instance at a time: some fire first, some are cleared first.
    const storage = openStores(db);
    const clears = (async () => {
      for (const id of ids) await storage.taskInstances.clearTaskInstances([{ id, retries: 0 }]);
    })();
    open(G);
    await clears;
    // Whichever came first, a clear is the last word: no task instance waits or was resumed after it.
    expect(new Set([...(await states(db, ids)).values()].map((ti) => ti.state))).toEqual(new Set([null]));
    await noRowsLeft(db);
    running.proc.kill('SIGTERM');
    expect(await running.proc.exit).toEqual({ code: 0, signal: null });
  }, 90_000);
});
