// What the triggerer writes when the database refuses some of it: one bad outcome never holds up
// another, text PostgreSQL cannot store is handled the same way on both dialects, and a write
// that keeps failing backs off and is reported once.
import { sql } from 'kysely';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/index.ts';
import { TRIGGER_FAILURE_METHOD } from '../../src/internals.ts';
import { openStores, type Stores } from '../../src/storage/index.ts';
import type { MoveResult, TriggerEventOutcome, TriggerStore } from '../../src/storage/index.ts';
import { OutcomeWriter } from '../../src/daemons/triggerer/outcome-writer.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, LogCapture, migratedDatabase, taskInstance, waitFor, type TestDatabase, submitEvents } from '../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('outcome writes on %s', (dialect) => {
  const open: { databases: TestDatabase[]; triggerers: TestTriggerer[]; writers: OutcomeWriter[] } = { databases: [], triggerers: [], writers: [] };
  afterEach(async () => {
    for (const writer of open.writers.splice(0)) writer.close();
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    return db;
  };
  const deferOnto = async (db: TestDatabase, trigger: import('../../src/index.ts').BaseTrigger) => {
    const id = await createTaskInstance(db);
    const { triggerId } = await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume', deduplicate: false }));
    return { id, triggerId };
  };
  const writer = (
    db: TestDatabase,
    storage: Stores,
    logs: LogCapture,
    retry = { retryDelayMs: 1000, maxRetryDelayMs: 30_000 },
    onWritten: (ids: number[]) => void = () => {},
  ) => {
    const w = new OutcomeWriter(storage, pino({ level: 'debug' }, logs), {
      batchSize: 2000,
      concurrency: db.adapter.concurrentWrites,
      refusesValues: db.adapter.refusesValues,
      unavailable: db.adapter.unavailable,
      ...retry,
    });
    w.events.on('written', onWritten);
    open.writers.push(w);
    return w;
  };

  it('a trigger whose payload or error holds U+0000 or a lone surrogate fails only its own task instances; the others fire', async () => {
    const db = await database();
    const nulPayload = await deferOnto(db, new t.UnstorableTextTrigger({}));
    const surrogatePayload = await deferOnto(db, new t.UnstorableTextTrigger({ surrogate: true }));
    const nulError = await deferOnto(db, new t.UnstorableTextTrigger({ throws: true }));
    const healthy = await Promise.all([1, 2, 3].map((n) => deferOnto(db, new t.DelayTrigger({ ms: 50 * n }))));
    const tr = await startTriggerer(db);
    open.triggerers.push(tr);
    const all = [nulPayload, surrogatePayload, nulError, ...healthy];
    await waitFor(async () => (await Promise.all(all.map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'every task instance out of deferred',
    });

    for (const { id } of healthy) expect((await taskInstance(db, id)).next_method).toBe('resume');
    // A payload the database cannot store is refused where it is made, naming the value.
    for (const [{ id }, what] of [
      [nulPayload, 'U+0000'],
      [surrogatePayload, 'lone surrogate'],
    ] as const) {
      const ti = await taskInstance(db, id);
      expect(ti.next_method).toBe(TRIGGER_FAILURE_METHOD);
      expect(ti.next_kwargs).toMatchObject({ code: 'DF_NOT_STORABLE', reason: 'trigger_failure' });
      expect(String(ti.next_kwargs!.error)).toContain('event.payload.text');
      expect(String(ti.next_kwargs!.error)).toContain(what);
    }
    // An error message is deferflow's text about a failure: stored, with U+FFFD for what cannot be.
    const failed = await taskInstance(db, nulError.id);
    expect(failed.next_kwargs).toMatchObject({ code: 'DF_TRIGGER_FAILED' });
    expect(String(failed.next_kwargs!.error)).toContain('remote said before\ufffdafter');
    expect(tr.logs.matching((l) => l.code === 'DF_DATABASE')).toEqual([]);
  });

  it('kwargs, next_kwargs and trigger kwargs holding U+0000 are refused at defer time with DF_NOT_STORABLE and the path; nothing is written', async () => {
    const db = await database();
    const id = await createTaskInstance(db);
    const attempts = [
      () => new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume', kwargs: { note: 'a\u0000b' } }),
      () => new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume', kwargs: { 'key\u0000': 'value' } }),
      () => new TaskDeferred({ trigger: new t.NeverTrigger({ tag: 'x\u0000y' }), method: 'resume' }),
    ];
    const errors = attempts.map((attempt) => {
      try {
        attempt();
      } catch (error) {
        return error as { code: string; message: string };
      }
      throw new Error('accepted');
    });
    expect(errors.map((error) => error.code)).toEqual(['DF_NOT_STORABLE', 'DF_NOT_STORABLE', 'DF_NOT_STORABLE']);
    expect(errors[0]!.message).toContain('next_kwargs.note holds U+0000');
    expect(errors[1]!.message).toContain('the key holds U+0000');
    expect(errors[2]!.message).toContain('test.NeverTrigger kwargs.tag');
    expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);
    expect((await taskInstance(db, id)).state).toBe('running');
  });

  it('a batch the database refuses is split: only the refused outcome fails its task instances (DF_OUTCOME_REFUSED), every other one is written', async () => {
    const db = await database();
    const targets = await Promise.all(Array.from({ length: 7 }, (_, n) => deferOnto(db, new t.NeverTrigger({ n }))));
    const logs = new LogCapture();
    const w = writer(db, openStores(db), logs);
    // Malformed JSON stands for any value the database refuses: both dialects refuse it.
    const refused = targets[4]!;
    for (const { triggerId } of targets) w.add(eventOf(triggerId, triggerId === refused.triggerId ? '{"not json' : JSON.stringify({ n: triggerId })));
    await waitFor(async () => (await Promise.all(targets.map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'every task instance moved',
    });

    for (const target of targets) {
      const ti = await taskInstance(db, target.id);
      if (target === refused) {
        expect(ti.next_method).toBe(TRIGGER_FAILURE_METHOD);
        expect(ti.next_kwargs).toMatchObject({ code: 'DF_OUTCOME_REFUSED', reason: 'trigger_failure' });
        expect(String(ti.next_kwargs!.error)).toContain(`the database refused the event of trigger ${refused.triggerId}`);
      } else {
        expect(ti.next_event).toEqual({ n: target.triggerId });
      }
    }
    const refusals = await logs.waitForLines((l) => l.code === 'DF_OUTCOME_REFUSED', { what: 'the refusal logged' });
    expect(refusals.map((l) => l.trigger_id)).toEqual([refused.triggerId]);
    // Refused values are no outage: nothing waits on a backoff, nothing is reported as one.
    expect(logs.matching((l) => l.code === 'DF_DATABASE')).toEqual([]);
  });

  it('a write that keeps failing backs off, is reported once per distinct error with the outcomes waiting, and loses nothing', async () => {
    const db = await database();
    const first = await Promise.all([1, 2, 3].map((n) => deferOnto(db, new t.NeverTrigger({ n }))));
    const second = await deferOnto(db, new t.NeverTrigger({ n: 4 }));
    const storage = openStores(db);
    const attempts: number[] = [];
    // A connection that drops once, then, for the last event, five times running: not a refusal of the values.
    const failuresPlanned = [
      'connection reset',
      null,
      'connection reset',
      'connection reset',
      'connection reset',
      'server closed the connection',
      'server closed the connection',
    ];
    const failing = withSubmitEvents(storage, async (events) => {
      const failure = failuresPlanned[attempts.length];
      attempts.push(Date.now());
      if (failure) throw Object.assign(new Error(failure), { code: 'ECONNRESET' });
      return submitEvents(storage, events);
    });
    const logs = new LogCapture();
    const w = writer(db, failing, logs, { retryDelayMs: 40, maxRetryDelayMs: 160 });
    for (const { triggerId } of first) w.add(eventOf(triggerId, '"fired"'));
    await waitFor(async () => (await Promise.all(first.map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'the first events written',
    });
    await waitFor(() => logs.matching((l) => typeof l.failed_writes === 'number').length === 1, { what: 'the recovery reported' });
    attempts.splice(0);
    failuresPlanned.splice(0, 2);
    w.add(eventOf(second.triggerId, '"fired"'));
    await waitFor(async () => (await taskInstance(db, second.id)).state === 'scheduled', { what: 'the last event written at last' });

    const reported = logs.matching((l) => l.level === 50);
    expect(reported.map((l) => [l.code, l.error, l.waiting])).toEqual([
      ['DF_DATABASE', 'Error: connection reset', 3],
      ['DF_DATABASE', 'Error: connection reset', 1],
      ['DF_DATABASE', 'Error: server closed the connection', 1],
    ]);
    // Each pause is at least the backoff for that failure: 40, 80, 160 ms, then at most 160.
    const pauses = attempts.slice(1).map((at, i) => at - attempts[i]!);
    expect(pauses).toHaveLength(5);
    for (const [i, least] of [40, 80, 160, 160, 160].entries()) expect(pauses[i]).toBeGreaterThanOrEqual(least - 5);
    await waitFor(() => logs.matching((l) => typeof l.failed_writes === 'number').length === 2, { what: 'the second recovery reported' });
    expect(logs.matching((l) => typeof l.failed_writes === 'number').map((l) => l.failed_writes)).toEqual([1, 5]);
  });

  it('a batch failing while the database is unavailable is kept whole, and written in one transaction once it is back', async () => {
    const db = await database();
    const waits = await Promise.all([1, 2, 3, 4, 5].map((n) => deferOnto(db, new t.NeverTrigger({ n }))));
    const storage = openStores(db);
    const attempts: number[] = [];
    let unavailable = true;
    const failing = withSubmitEvents(storage, async (events) => {
      attempts.push(events.length);
      if (unavailable) {
        // What each dialect's driver raises then: a server gone, or SQLite's lock held elsewhere.
        throw db.adapter.name === 'sqlite'
          ? Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' })
          : Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      }
      return submitEvents(storage, events);
    });
    const w = writer(db, failing, new LogCapture(), { retryDelayMs: 10, maxRetryDelayMs: 20 });
    for (const { triggerId } of waits.slice(0, 3)) w.add(eventOf(triggerId, '"fired"'));
    await waitFor(() => attempts.length >= 1, { what: 'a first failed write' });
    // Fired while the database is away: their first write fails on its own; retried, they join the others.
    for (const { triggerId } of waits.slice(3)) w.add(eventOf(triggerId, '"fired"'));
    await waitFor(() => attempts.length >= 8, { what: 'eight failed writes' });
    unavailable = false;
    await waitFor(async () => (await Promise.all(waits.map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'the events written once the database is back',
    });
    expectKeptWholeAndJoined(attempts);
  });

  it('tells a database that cannot be used for now from one refusing values, by the errors it really raises', async () => {
    const db = await database();
    const raised = async (statement: () => Promise<unknown>): Promise<unknown> => {
      try {
        await statement();
      } catch (error) {
        return error;
      }
      throw new Error('the statement was expected to fail');
    };
    const cases: [what: string, error: unknown, unavailable: boolean, refusesValues: boolean][] = [];
    if (dialect === 'sqlite') {
      const pages = Number((await sql<{ page_count: number }>`pragma page_count`.execute(db.db)).rows[0]!.page_count);
      await sql.raw(`pragma max_page_count = ${pages}`).execute(db.db);
      cases.push(['disk full', await raised(() => sql`create table filler (x)`.execute(db.db)), true, false]);
      await sql.raw('pragma max_page_count = 1073741823').execute(db.db);
      await sql`pragma query_only = 1`.execute(db.db);
      cases.push(['read-only', await raised(() => sql`create table filler (x)`.execute(db.db)), true, false]);
      await sql`pragma query_only = 0`.execute(db.db);
      cases.push(['not JSON', await raised(() => sql`select json('not json')`.execute(db.db)), false, true]);
    } else {
      const readOnly = () =>
        db.db.transaction().execute(async (trx) => {
          await sql`set transaction read only`.execute(trx);
          await sql`create table filler (x int)`.execute(trx);
        });
      cases.push(['read-only (a standby)', await raised(readOnly), true, false]);
      cases.push(['not JSON', await raised(() => sql`select cast('not json' as jsonb)`.execute(db.db)), false, true]);
      const { default: pg } = await import('pg');
      cases.push(['connection refused', await raised(() => new pg.Client({ host: '127.0.0.1', port: 1 }).connect()), true, false]);
    }
    const told = cases.map(([what, error]) => [what, db.adapter.unavailable(error), db.adapter.refusesValues(error)]);
    expect(told).toEqual(cases.map(([what, , unavailable, refusesValues]) => [what, unavailable, refusesValues]));
  });

  it.runIf(dialect === 'sqlite')('a full disk fails no task instance: the batch is kept whole and written once there is room', async () => {
    const db = await database();
    const waits = await Promise.all([1, 2, 3, 4, 5].map((n) => deferOnto(db, new t.NeverTrigger({ n }))));
    const storage = openStores(db);
    const attempts: number[] = [];
    const counting = withSubmitEvents(storage, (events) => {
      attempts.push(events.length);
      return submitEvents(storage, events);
    });
    // A real SQLITE_FULL: the file may not grow by a page, and each payload needs overflow pages.
    const pages = Number((await sql<{ page_count: number }>`pragma page_count`.execute(db.db)).rows[0]!.page_count);
    await sql.raw(`pragma max_page_count = ${pages}`).execute(db.db);
    const payload = JSON.stringify({ report: 'x'.repeat(20_000) });
    const logs = new LogCapture();
    const w = writer(db, counting, logs, { retryDelayMs: 10, maxRetryDelayMs: 20 });
    for (const { triggerId } of waits.slice(0, 3)) w.add(eventOf(triggerId, payload));
    await waitFor(() => attempts.length >= 1, { what: 'a first failed write' });
    for (const { triggerId } of waits.slice(3)) w.add(eventOf(triggerId, payload));
    await waitFor(() => attempts.length >= 8, { what: 'eight failed writes' });
    expect(logs.matching((l) => l.code === 'DF_DATABASE' && /database or disk is full/.test(String(l.error))).length).toBeGreaterThanOrEqual(1);
    await sql.raw('pragma max_page_count = 1073741823').execute(db.db);
    await waitFor(async () => (await Promise.all(waits.map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'the events written once there is room',
    });
    for (const { id } of waits) {
      const ti = await taskInstance(db, id);
      expect(ti.next_method).toBe('resume');
      expect(ti.next_event).toEqual(JSON.parse(payload));
    }
    // Never split (that is for finding a culprit value), and joined with the newcomers.
    expectKeptWholeAndJoined(attempts);
    expect(logs.matching((l) => l.code === 'DF_OUTCOME_REFUSED')).toEqual([]);
  });

  it('an outcome whose write keeps failing for a reason the dialect does not recognise does not hold up the others', async () => {
    const db = await database();
    const stuck = await deferOnto(db, new t.NeverTrigger({ n: 'stuck' }));
    const batchMates = await Promise.all([1, 2, 3].map((n) => deferOnto(db, new t.NeverTrigger({ n }))));
    const later = await deferOnto(db, new t.NeverTrigger({ n: 'later' }));
    const storage = openStores(db);
    const failing = withSubmitEvents(storage, async (events) => {
      if (events.some((event) => event.triggerId === stuck.triggerId)) throw new Error('something only this outcome triggers');
      return submitEvents(storage, events);
    });
    const logs = new LogCapture();
    const w = writer(db, failing, logs, { retryDelayMs: 20, maxRetryDelayMs: 50 });
    for (const { triggerId } of [stuck, ...batchMates]) w.add(eventOf(triggerId, '"fired"'));
    w.add(eventOf(later.triggerId, '"later"'));
    await waitFor(async () => (await Promise.all([...batchMates, later].map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'the other outcomes written',
    });
    // Not failed either: an error the dialect cannot place is retried, never taken for a refusal.
    expect((await taskInstance(db, stuck.id)).state).toBe('deferred');
    await waitFor(() => w.pending === 1, { what: 'the written ones forgotten, the stuck one still kept' });
    expect(logs.matching((l) => l.level === 50).length).toBe(1);
  });

  it('a failed delete of fired rows is retried on its own backoff, even while another outcome waits for a retry', async () => {
    const db = await database();
    const stuck = await deferOnto(db, new t.NeverTrigger({ n: 'stuck' }));
    const fired = await deferOnto(db, new t.NeverTrigger({ n: 'fired' }));
    const storage = openStores(db);
    let deleteAttempts = 0;
    const failing = withSubmitEvents(
      storage,
      async (events) => {
        if (events.some((event) => event.triggerId === stuck.triggerId)) throw new Error('something only this outcome triggers');
        return submitEvents(storage, events);
      },
      async (ids) => {
        if (++deleteAttempts === 1) throw new Error('lock timeout while deleting');
        return storage.triggers.deleteUnusedTriggers(ids);
      },
    );
    const forgotten: number[] = [];
    const w = writer(db, failing, new LogCapture(), { retryDelayMs: 20, maxRetryDelayMs: 50 }, (ids) => forgotten.push(...ids));
    w.add(eventOf(stuck.triggerId, '"stuck"'));
    await waitFor(() => w.pending === 1, { what: 'the stuck outcome waiting for its retry' });
    w.add(eventOf(fired.triggerId, '"fired"'));
    await waitFor(() => forgotten.includes(fired.triggerId), { what: 'the fired trigger deleted and forgotten after one failed delete' });
    expect(deleteAttempts).toBeGreaterThanOrEqual(2);
    expect(await db.db.selectFrom('trigger').select('id').where('id', '=', fired.triggerId).execute()).toEqual([]);
    expect((await taskInstance(db, stuck.id)).state).toBe('deferred');
  });
});

/** `storage`, its event writes going through `submitEvents` (a database that fails on cue). */
/**
 * Three outcomes failing, two more added while the database is away: the batch was never split,
 * and after the newcomers' own first failure (their attempt of 2) every attempt carried all five
 * (split or kept apart, they would be written one piece at a time).
 */
function expectKeptWholeAndJoined(attempts: readonly number[]): void {
  const joined = attempts.slice(attempts.indexOf(2) + 1);
  expect(attempts.slice(0, attempts.indexOf(2)).every((size) => size === 3)).toBe(true);
  expect(joined.length).toBeGreaterThanOrEqual(3);
  expect(joined.every((size) => size === 5)).toBe(true);
}

/** An event as the runner hands it to the writer. */
function eventOf(triggerId: number, payloadJson: string): TriggerEventOutcome {
  return { kind: 'event', triggerId, payloadJson, endState: null, firedAt: performance.now() };
}

function withSubmitEvents(
  storage: Stores,
  submit: (events: readonly TriggerEventOutcome[]) => Promise<MoveResult>,
  deleteUnusedTriggers: TriggerStore['deleteUnusedTriggers'] = storage.triggers.deleteUnusedTriggers.bind(storage.triggers),
): Stores {
  const triggers = storage.triggers;
  const moveDeferredTaskInstances: TriggerStore['moveDeferredTaskInstances'] = (prepared) =>
    prepared.kind === 'event'
      ? submit(
          prepared.outcomes.map((outcome) => ({
            kind: 'event',
            triggerId: outcome.triggerId,
            payloadJson: outcome.json,
            endState: outcome.endState ?? null,
            firedAt: 0,
          })),
        )
      : triggers.moveDeferredTaskInstances(prepared);
  const fake = {
    prepareOutcomes: triggers.prepareOutcomes.bind(triggers),
    moveDeferredTaskInstances,
    deleteUnusedTriggers,
  } as Partial<TriggerStore> as TriggerStore;
  return { ...storage, triggers: fake };
}
