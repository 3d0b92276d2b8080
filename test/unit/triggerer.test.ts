import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/index.ts';
import { TRIGGER_FAILURE_METHOD } from '../../src/internals.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { openStores } from '../../src/storage/index.ts';
import { NotificationHub } from '../../src/database/notification-hub.ts';
import * as t from '../fixtures/test-triggers.ts';
import { SteppedClock } from '../support/clock.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase, submitEvents, submitFailures } from '../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('triggerer on %s', (dialect) => {
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
  const triggerer = async (...args: Parameters<typeof startTriggerer>) => {
    const tr = await startTriggerer(...args);
    open.triggerers.push(tr);
    return tr;
  };
  const deferOnto = async (
    db: TestDatabase,
    trigger: InstanceType<typeof t.ImmediateTrigger> | import('../../src/index.ts').BaseTrigger,
    extra: { kwargs?: Record<string, string>; timeout?: number; priorityWeight?: number } = {},
  ) => {
    const id = await createTaskInstance(db, { priorityWeight: extra.priorityWeight });
    const result = await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({ trigger, method: 'resume', kwargs: extra.kwargs ?? { note: 'kept' }, timeout: extra.timeout }),
    );
    return { id, triggerId: result.triggerId };
  };
  const countTriggers = async (db: TestDatabase) =>
    Number(
      (
        await db.db
          .selectFrom('trigger')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );

  it('an event moves every task instance deferred on the trigger to scheduled, once, and deletes the trigger', async () => {
    const db = await database();
    const shared = [0, 1, 2].map(() => new t.DelayTrigger({ ms: 150 }));
    const a = await deferOnto(db, shared[0]!);
    const b = await deferOnto(db, shared[1]!, { kwargs: { other: 'kwarg' } });
    const c = await deferOnto(db, shared[2]!);
    expect(new Set([a.triggerId, b.triggerId, c.triggerId]).size).toBe(1);
    const waiting = await deferOnto(db, new t.NeverTrigger({}));
    const tr = await triggerer(db);

    await waitFor(async () => (await taskInstance(db, c.id)).state === 'scheduled', { what: 'the event' });
    for (const { id } of [a, c]) {
      const ti = await taskInstance(db, id);
      expect(ti).toMatchObject({ state: 'scheduled', trigger_id: null, next_method: 'resume' });
      expect(ti.next_kwargs).toEqual({ note: 'kept' });
      expect(ti.next_event).toEqual({ slept: 150 });
    }
    expect(await taskInstance(db, b.id)).toMatchObject({ next_kwargs: { other: 'kwarg' }, next_event: { slept: 150 } });
    // The fired trigger's row goes right after its task instances move.
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('id', '=', a.triggerId).execute()).length === 0, {
      what: 'the fired trigger deleted',
    });
    expect((await taskInstance(db, waiting.id)).state).toBe('deferred');

    // Lines are logged after the commit another connection already saw: wait for them, then count.
    const moved = () => tr.logs.matching((l) => l.kind === 'event').reduce((sum, l) => sum + Number(l.moved_task_instances), 0);
    await waitFor(() => moved() >= 3, { what: 'the event logged' });
    expect(moved()).toBe(3);
  });

  it('an end event finishes its task instances itself: success keeps the payload as return value, failed and skipped end there', async () => {
    const db = await database();
    const succeeded = [
      await deferOnto(db, new t.EndTaskTrigger({ state: 'success', payload: 'the result', ms: 20 })),
      await deferOnto(db, new t.EndTaskTrigger({ state: 'success', payload: 'the result', ms: 20 })),
    ];
    const failed = await deferOnto(db, new t.EndTaskTrigger({ state: 'failed', payload: 'remote job failed' }));
    const skipped = await deferOnto(db, new t.EndTaskTrigger({ state: 'skipped' }));
    const invalid = await deferOnto(db, new t.EndTaskTrigger({ state: 'done' }));
    const tr = await triggerer(db);

    await waitFor(
      async () => (await Promise.all([succeeded[1]!, failed, skipped, invalid].map(({ id }) => taskInstance(db, id)))).every((ti) => ti.state !== 'deferred'),
      {
        what: 'every end event written',
      },
    );
    for (const { id } of succeeded) {
      const ti = await taskInstance(db, id);
      expect(ti).toMatchObject({ state: 'success', trigger_id: null, next_method: null, next_kwargs: null, trigger_timeout: null });
      expect(ti.end_date).not.toBeNull();
      expect(JSON.parse(ti.return_value!)).toBe('the result');
    }
    expect(await taskInstance(db, failed.id)).toMatchObject({ state: 'failed', return_value: null, next_method: null });
    expect(await taskInstance(db, skipped.id)).toMatchObject({ state: 'skipped', return_value: null });
    // A malformed end event fails the trigger: its task instance resumes at the failure method, naming the problem.
    const broken = await taskInstance(db, invalid.id);
    expect(broken).toMatchObject({ state: 'scheduled', next_method: TRIGGER_FAILURE_METHOD });
    expect(broken.next_kwargs!.error).toContain('taskState "done"');
    const ended = () => tr.logs.matching((l) => l.kind === 'event').reduce((sum, l) => sum + Number(l.ended_task_instances), 0);
    await waitFor(() => ended() >= 4, { what: 'the end events logged' });
    expect(ended()).toBe(4);
  });

  it('a duplicate or late event changes nothing', async () => {
    const db = await database();
    const storage = openStores(db);
    const first = await deferOnto(db, new t.ImmediateTrigger({ payload: 'one' }));
    expect(await submitEvents(storage, [{ triggerId: first.triggerId, payloadJson: '"one"' }])).toEqual({
      movedTaskInstances: 1,
      endedTaskInstances: 0,
      resolvedComposites: [],
    });
    expect(await storage.triggers.deleteUnusedTriggers([first.triggerId])).toBe(1);
    const before = await taskInstance(db, first.id);
    // The same event again (a triggerer that lost ownership during a pause): nothing moves.
    expect(await submitEvents(storage, [{ triggerId: first.triggerId, payloadJson: '"two"' }])).toEqual({
      movedTaskInstances: 0,
      endedTaskInstances: 0,
      resolvedComposites: [],
    });
    expect(await taskInstance(db, first.id)).toEqual(before);
    // A late failure for a trigger whose task instance has moved on changes nothing either.
    await submitFailures(storage, [
      { triggerId: first.triggerId, failure: { code: 'DF_TRIGGER_FAILED', error: 'late', traceback: null, reason: 'trigger_failure' } },
    ]);
    expect(await taskInstance(db, first.id)).toEqual(before);
  });

  it('each kind of bad trigger fails only its own task instances; the others still fire', async () => {
    const db = await database();
    const bad = {
      throws: await deferOnto(db, new t.ThrowingTrigger({ tag: 'T1' })),
      endsEarly: await deferOnto(db, new t.EndsWithoutEventTrigger({})),
      badKwargs: await deferOnto(db, Object.assign(new t.BadConstructorTrigger({ count: 1 }), { kwargs: { count: 'many' } })),
      notJson: await deferOnto(db, new t.NonJsonEventTrigger({})),
      notAllowed: await deferOnto(db, new t.UnregisteredTrigger({})),
    };
    await db.db
      .insertInto('trigger')
      .values({ classpath: 'nowhere.Missing', kwargs: '{}', created_at: new Date().toISOString(), triggerer_id: null, hash: null })
      .execute();
    const unknownTrigger = await db.db.selectFrom('trigger').select('id').where('classpath', '=', 'nowhere.Missing').executeTakeFirstOrThrow();
    const unknownTi = await createTaskInstance(db, { state: 'deferred' });
    await db.db
      .updateTable('task_instance')
      .set({ trigger_id: unknownTrigger.id, next_method: 'resume', next_kwargs: '{}' })
      .where('id', '=', unknownTi)
      .execute();
    const good = await deferOnto(db, new t.DelayTrigger({ ms: 300 }));

    const tr = await triggerer(db);
    const ids = [...Object.values(bad).map((b) => b.id), unknownTi, good.id];
    await waitFor(async () => (await Promise.all(ids.map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled'), {
      what: 'all task instances scheduled',
    });

    // Every failure marker carries the stable code of what went wrong, beside the text.
    const error = async (id: number, code: string) => {
      const ti = await taskInstance(db, id);
      expect(ti.next_method).toBe(TRIGGER_FAILURE_METHOD);
      expect(ti.next_kwargs).toMatchObject({ reason: 'trigger_failure', code });
      return String(ti.next_kwargs!.error);
    };
    expect(await error(bad.throws.id, 'DF_TRIGGER_FAILED')).toContain('boom from T1');
    expect((await taskInstance(db, bad.throws.id)).next_kwargs!.traceback).toContain('ThrowingTrigger');
    expect(await error(bad.endsEarly.id, 'DF_TRIGGER_FAILED')).toContain('ended without yielding an event');
    expect(await error(bad.badKwargs.id, 'DF_TRIGGER_FAILED')).toContain('count must be a number, got "many"');
    expect(await error(bad.notJson.id, 'DF_NOT_JSON')).toContain('event.payload.when');
    expect(await error(bad.notAllowed.id, 'DF_UNKNOWN_TRIGGER')).toContain('"test.NotAllowedTrigger" is not allowed');
    expect(await error(unknownTi, 'DF_UNKNOWN_TRIGGER')).toContain('"nowhere.Missing" is not allowed');
    const goodTi = await taskInstance(db, good.id);
    expect(goodTi).toMatchObject({ state: 'scheduled', next_method: 'resume' });
    expect(goodTi.next_event).toEqual({ slept: 300 });

    const failureLogsNow = () => tr.logs.matching((l) => l.level === 50 && typeof l.trigger_id === 'number');
    await waitFor(() => failureLogsNow().length >= 6, { what: 'every failure logged' });
    const failureLogs = failureLogsNow();
    expect(failureLogs.map((l) => l.classpath).sort()).toEqual(
      [
        'nowhere.Missing',
        'test.BadConstructorTrigger',
        'test.EndsWithoutEventTrigger',
        'test.NonJsonEventTrigger',
        'test.NotAllowedTrigger',
        'test.ThrowingTrigger',
      ].sort(),
    );
    // ...and so does every error log line about them.
    expect(Object.fromEntries(failureLogs.map((l) => [l.classpath, l.code]))).toMatchObject({
      'nowhere.Missing': 'DF_UNKNOWN_TRIGGER',
      'test.ThrowingTrigger': 'DF_TRIGGER_FAILED',
      'test.NonJsonEventTrigger': 'DF_NOT_JSON',
    });
    await waitFor(async () => (await countTriggers(db)) === 0, { what: 'every failed trigger deleted' });
  });

  it("masks a trigger's secret kwargs in its stored log lines, its own log and its failure", async () => {
    const db = await database();
    const secret = 'sk-live-0a1b2c3d';
    const failing = await deferOnto(db, new t.SecretThrowingTrigger({ token: secret }));
    const tr = await triggerer(db);
    await waitFor(async () => (await taskInstance(db, failing.id)).state === 'scheduled', { what: 'the failure written' });
    const ti = await taskInstance(db, failing.id);
    expect(String(ti.next_kwargs!.error)).toContain('auth refused for token ***');
    expect(JSON.stringify(ti.next_kwargs)).not.toContain(secret);
    await tr.stop();
    const stored = await db.db.selectFrom('trigger_log').select(['trigger_id', 'message', 'fields']).execute();
    expect(stored.map((row) => [row.trigger_id, row.message])).toEqual([[failing.triggerId, 'signing in with ***']]);
    expect(JSON.stringify(stored)).not.toContain(secret);
    expect(tr.logs.lines.some((line) => line.msg === 'signing in with ***' && line.token === '***')).toBe(true);
    expect(JSON.stringify(tr.logs.lines)).not.toContain(secret);
  });

  it('fails a deferral whose timeout passes within one second of its deadline, once, with two triggerers sweeping', async () => {
    const db = await database();
    const timed = await deferOnto(db, new t.NeverTrigger({ tag: 'timed' }), { timeout: 1.2 });
    const untimed = await deferOnto(db, new t.NeverTrigger({ tag: 'untimed' }));
    const deadline = (await db.db.selectFrom('task_instance').select('trigger_timeout').where('id', '=', timed.id).executeTakeFirstOrThrow()).trigger_timeout!;
    const deadlineMs = new Date(deadline).getTime();
    const one = await triggerer(db);
    const two = await triggerer(db);
    await waitFor(async () => (await taskInstance(db, timed.id)).state === 'scheduled', { what: 'the timeout', intervalMs: 10 });
    const ti = await taskInstance(db, timed.id);
    expect(ti).toMatchObject({ state: 'scheduled', trigger_id: null, next_method: TRIGGER_FAILURE_METHOD });
    expect(ti.next_kwargs).toMatchObject({ reason: 'timeout' });
    // When the sweep moved it, as the row says (not when this test, on a busy machine, saw it).
    const movedAt = new Date(ti.updated_at!).getTime();
    expect(movedAt).toBeGreaterThanOrEqual(deadlineMs);
    expect(movedAt - deadlineMs).toBeLessThan(1000);
    // The sweep logs after its commit, which this test's own connection may see first: wait for
    // the line before counting, so the count proves "once" instead of racing the log.
    const timedOutCount = () =>
      [...one.logs.lines, ...two.logs.lines].filter((l) => typeof l.timed_out === 'number').reduce((s, l) => s + Number(l.timed_out), 0);
    await waitFor(async () => timedOutCount() > 0, { what: 'the timeout logged' });
    expect(timedOutCount()).toBe(1);
    expect((await taskInstance(db, untimed.id)).state).toBe('deferred');
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('id', '=', timed.triggerId).execute()).length === 0, {
      what: 'the timed-out trigger deleted',
    });
  });

  it('never owns more triggers than its capacity, and claims highest priority first', async () => {
    const db = await database();
    for (let i = 0; i < 12; i++) await deferOnto(db, new t.NeverTrigger({ n: i }), { priorityWeight: i === 7 ? 100 : 1 });
    const tr = await triggerer(db, { capacity: 5, claimsPerLoop: 2 });
    const owned = async () =>
      Number(
        (
          await db.db
            .selectFrom('trigger')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('triggerer_id', '=', tr.triggerer.jobId)
            .executeTakeFirstOrThrow()
        ).n,
      );
    const seen: number[] = [];
    const until = Date.now() + 1500;
    while (Date.now() < until) {
      seen.push(await owned());
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(Math.max(...seen)).toBe(5);
    expect(tr.triggerer.heldTriggerIds.length).toBe(5);
    const first = tr.logs.matching((l) => typeof l.claimed === 'number')[0];
    expect(first?.claimed).toBe(2);
    const urgent = await db.db.selectFrom('trigger').select('triggerer_id').where('priority_weight', '=', 100).executeTakeFirstOrThrow();
    expect(urgent.triggerer_id).toBe(tr.triggerer.jobId);
  });

  it('takes over a trigger whose owner has no job row (pruned or deleted); orphans (no task instance waits on them) are never run and never hold up the claims behind them', async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-orphan-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    // Owned by a triggerer whose job row is gone: before, its task instance waited forever.
    const ownerless = await deferOnto(db, new t.DelayTrigger({ ms: 10 }));
    await db.db.updateTable('trigger').set({ triggerer_id: 987_654 }).where('id', '=', ownerless.triggerId).execute();
    // Orphans: trigger rows no task instance points at (fired by a triggerer that died before
    // deleting them, say), more of them at the head of the claim order than one claim takes.
    const orphans = Array.from({ length: 60 }, (_, n) => ({
      classpath: 'test.NeverTrigger',
      kwargs: JSON.stringify({ file, tag: `orphan${n}` }),
      created_at: new Date().toISOString(),
      triggerer_id: null,
      hash: null,
      priority_weight: 100,
    }));
    await db.db.insertInto('trigger').values(orphans).execute();
    const waited = await deferOnto(db, new t.NeverTrigger({ file, tag: 'waited' }));
    await triggerer(db, { claimsPerLoop: 50 }, { cleanupIntervalMs: 300 });

    await waitFor(async () => (await taskInstance(db, ownerless.id)).state === 'scheduled', { what: 'the ownerless trigger taken over and fired' });
    expect((await taskInstance(db, ownerless.id)).next_event).toEqual({ slept: 10 });
    await waitFor(() => readFileSync(file, 'utf8').includes('start waited'), { what: 'the waited-on trigger running' });
    // The orphans ranked first (priority 100): deleted as the claims met them, never run.
    expect(readFileSync(file, 'utf8')).not.toContain('orphan');
    expect(await db.db.selectFrom('trigger').select('id').where('priority_weight', '=', 100).execute()).toEqual([]);
    expect((await taskInstance(db, waited.id)).state).toBe('deferred');
  });

  it('reads the triggers it owns and sweeps unused rows page by page, missing none and deleting only what nothing waits on', async () => {
    const db = await database();
    const storage = openStores(db);
    const waited = [];
    for (let n = 0; n < 7; n++) waited.push(await deferOnto(db, new t.NeverTrigger({ file: '/dev/null', tag: `waited${n}` })));
    const orphans = await db.db
      .insertInto('trigger')
      .values(
        Array.from({ length: 5 }, (_, n) => ({
          classpath: 'test.NeverTrigger',
          kwargs: JSON.stringify({ file: '/dev/null', tag: `orphan${n}` }),
          created_at: new Date().toISOString(),
          triggerer_id: null,
          hash: null,
        })),
      )
      .returning('id')
      .execute();
    const owner = 424_242;
    await db.db.updateTable('trigger').set({ triggerer_id: owner }).execute();

    const pages: number[][] = [];
    for (let afterId = 0; ; ) {
      const page = await storage.triggers.listOwnedTriggerIds(owner, { afterId, limit: 3 });
      pages.push(page);
      if (page.length < 3) break;
      afterId = page[page.length - 1]!;
    }
    const all = [...waited.map((w) => w.triggerId), ...orphans.map((o) => o.id)].sort((a, b) => a - b);
    expect(pages.flat()).toEqual(all);
    expect(pages.every((page) => page.length <= 3)).toBe(true);

    let deleted = 0;
    let statements = 0;
    for (let afterId: number | null = 0; afterId !== null; statements++) {
      const page: { deleted: number; lastId: number | null } = await storage.triggers.sweepUnusedTriggers(afterId, 3);
      deleted += page.deleted;
      afterId = page.lastId;
    }
    expect(deleted).toBe(5);
    expect(statements).toBeGreaterThanOrEqual(4);
    expect((await db.db.selectFrom('trigger').select('id').orderBy('id').execute()).map((row) => row.id)).toEqual(
      waited.map((w) => w.triggerId).sort((a, b) => a - b),
    );
  });

  it('stopped while it compares what it owns with what it holds, cancels its triggers as a stop does, never as taken over', async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-stop-reconcile-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    for (const tag of ['a', 'b', 'c']) await deferOnto(db, new t.NeverTrigger({ file, tag }));
    const tr = await triggerer(db);
    await waitFor(
      () =>
        readFileSync(file, 'utf8')
          .split('\n')
          .filter((line) => line.startsWith('start')).length === 3,
      { what: 'three running' },
    );
    // The next pass reads a digest that differs from what it holds (so it reconciles), and the
    // stop begins before that read returns: the reconcile then runs with the daemon stopping.
    const triggers = tr.triggerer.storage.triggers;
    const read = triggers.readTriggerOwnership.bind(triggers);
    let stopping: Promise<void> | null = null;
    triggers.readTriggerOwnership = async (jobId) => {
      const ownership = await read(jobId);
      if (stopping) return ownership;
      stopping = tr.stop();
      await new Promise((resolve) => setImmediate(resolve));
      return { ...ownership, own: { ...ownership.own, count: ownership.own.count + 1 } };
    };
    tr.triggerer.wake();
    await waitFor(() => stopping !== null, { what: 'the stop to begin in a pass' });
    await stopping;

    expect(tr.logs.matching((line) => String(line.msg).includes('no longer ours'))).toEqual([]);
    expect(tr.logs.matching((line) => line.released_triggers === 3)).toHaveLength(1);
    const lines = readFileSync(file, 'utf8').split('\n');
    expect(lines.filter((line) => line.startsWith('cleanup'))).toHaveLength(3);
    expect(lines.filter((line) => line.startsWith('kill'))).toEqual([]);
  });

  it('fails a deferral pushed while the timeout sweep was reading at its deadline, not at the next safety-net sweep', async () => {
    const db = await database();
    // It owns a trigger already: a claim then wakes no peers (no push of its own to hide the bug).
    const first = await deferOnto(db, new t.NeverTrigger({ tag: 'first' }));
    const tr = await triggerer(db);
    await waitFor(() => tr.triggerer.heldTriggerIds.includes(first.triggerId), { what: 'the first trigger running' });
    // On PostgreSQL pushes are known to arrive once the LISTEN session is up: the sweep then
    // sleeps as long as the safety net (10 s), trusting each deferral's push to wake it.
    if (dialect === 'postgres') await waitFor(() => NotificationHub.of(db, tr.triggerer.log).pushWorks, { what: 'pushes working' });
    const triggers = tr.triggerer.storage.triggers;
    const read = triggers.nextDeferralDeadline.bind(triggers);
    let timed: { id: number } | null = null;
    triggers.nextDeferralDeadline = async () => {
      const deadline = await read();
      // The deferral with the nearest deadline commits (and pushes) after this read, before it returns.
      timed ??= await deferOnto(db, new t.NeverTrigger({ tag: 'timed' }), { timeout: 0.5 });
      return deadline;
    };
    // Another deferral's push starts a sweep.
    await deferOnto(db, new t.NeverTrigger({ tag: 'second' }));
    await waitFor(() => timed !== null, { what: 'the sweep reading as the timed deferral commits' });
    // Timed out: back to scheduled, for a worker to fail it (the failure marker).
    await waitFor(async () => (await taskInstance(db, timed!.id)).next_method === TRIGGER_FAILURE_METHOD, {
      what: 'the timed deferral failed at its deadline',
      timeoutMs: 5000,
    });
    expect((await taskInstance(db, timed!.id)).state).toBe('scheduled');
  });

  it("takes over the triggers of a peer whose heartbeat its clock has put past the threshold, at its first pass, and never a live peer's", async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-stale-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    const ti = await deferOnto(db, new t.NeverTrigger({ file, tag: 'held' }));
    // Capacity 1: what is deferred later can only go to the peer, whose claim proves it made a pass.
    const frozen = await triggerer(db, { healthCheckThreshold: 30, capacity: 1 });
    await waitFor(() => readFileSync(file, 'utf8').includes('start held'), { what: 'the first triggerer running the trigger' });
    const ownerOf = async (triggerId: number) =>
      (await db.db.selectFrom('trigger').select('triggerer_id').where('id', '=', triggerId).executeTakeFirstOrThrow()).triggerer_id;
    expect(await ownerOf(ti.triggerId)).toBe(frozen.triggerer.jobId);

    // A peer on the same clock sees a fresh heartbeat: a whole pass (its claim of a new trigger) takes nothing of it.
    const peer = await triggerer(db, { healthCheckThreshold: 30 });
    const later = await deferOnto(db, new t.NeverTrigger({ file, tag: 'later' }));
    await waitFor(async () => (await ownerOf(later.triggerId)) === peer.triggerer.jobId, { what: "the peer's pass claiming the new trigger" });
    expect(await ownerOf(ti.triggerId)).toBe(frozen.triggerer.jobId);

    // One whose clock is past the threshold (as if every heartbeat had stopped 31 s ago) takes it over at its first pass.
    const clock = new SteppedClock();
    clock.advance(31_000);
    const late = await triggerer(db, { healthCheckThreshold: 30 }, {}, { clock });
    await waitFor(async () => [late.triggerer.jobId, peer.triggerer.jobId].includes(await ownerOf(ti.triggerId)), {
      what: 'the trigger taken over',
    });
    // To its clock the peer's heartbeat is as old: its first release takes the peer's trigger too.
    expect(late.logs.matching((line) => /of dead triggerers/.test(String(line.msg)))[0]?.msg).toBe('released 2 trigger(s) of dead triggerers');
    expect(peer.logs.matching((line) => /of dead triggerers/.test(String(line.msg)))).toEqual([]);
  });

  it('fails a stranded deferral (no trigger row, no timeout: it would wait forever) with DF_DEFERRAL_STRANDED, and counts it; one with a timeout waits for it', async () => {
    const db = await database();
    const stranded = await createTaskInstance(db, { state: 'deferred' });
    const timed = await createTaskInstance(db, { state: 'deferred' });
    await db.db
      .updateTable('task_instance')
      .set({ trigger_timeout: toDbTime(Date.now() + 3_600_000) })
      .where('id', '=', timed)
      .execute();
    const tr = await triggerer(db, {}, { cleanupIntervalMs: 50 });
    await waitFor(async () => (await taskInstance(db, stranded)).state === 'scheduled', { what: 'the stranded deferral failed' });
    const failed = await taskInstance(db, stranded);
    expect(failed.next_method).toBe(TRIGGER_FAILURE_METHOD);
    expect(failed.next_kwargs).toMatchObject({ code: 'DF_DEFERRAL_STRANDED', reason: 'trigger_failure' });
    expect((await taskInstance(db, timed)).state).toBe('deferred');
    expect(await tr.triggerer.metrics.registry.metrics()).toMatch(/^deferflow_stranded_deferrals_total 1$/m);
    expect(tr.logs.matching((line) => line.code === 'DF_DEFERRAL_STRANDED')).toHaveLength(1);
  });

  it('a claim never takes more triggers than asked for', async () => {
    const db = await database();
    for (let i = 0; i < 30; i++) await deferOnto(db, new t.NeverTrigger({ n: i }));
    const storage = openStores(db);
    const jobId = await storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'here', pid: 1, capacity: 30 });
    for (const limit of [1, 2, 5]) expect((await storage.triggers.claimTriggers(jobId, limit)).claimed).toBe(limit);
    const owned = await db.db.selectFrom('trigger').select('id').where('triggerer_id', '=', jobId).execute();
    expect(owned).toHaveLength(8);
  });

  it('names the trigger whose step blocks the event loop', async () => {
    const db = await database();
    const late = await deferOnto(db, new t.BlockingTrigger({ sleepMs: 20, blockMs: 300 }));
    const early = await deferOnto(db, new t.BlockingAtStartTrigger({ blockMs: 300 }));
    await deferOnto(db, new t.DelayTrigger({ ms: 50 }));
    const tr = await triggerer(db);
    await waitFor(async () => (await taskInstance(db, late.id)).state === 'scheduled' && (await taskInstance(db, early.id)).state === 'scheduled');
    const warningsNow = () => tr.logs.matching((l) => l.level === 40 && typeof l.blocked_ms === 'number' && typeof l.trigger_id === 'number');
    await waitFor(() => warningsNow().length >= 2, { what: 'both blocking steps warned about' });
    const warnings = warningsNow();
    expect(warnings.map((w) => [w.trigger_id, w.classpath]).sort()).toEqual(
      [
        [late.triggerId, 'test.BlockingTrigger'],
        [early.triggerId, 'test.BlockingAtStartTrigger'],
      ].sort(),
    );
    for (const w of warnings) expect(Number(w.blocked_ms)).toBeGreaterThanOrEqual(290);
  });

  it('stops a trigger taken over by a peer with cleanup() only, and one whose task instance was cleared with onKill() then cleanup()', async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-cleanup-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    const moved = await deferOnto(db, new t.NeverTrigger({ file, tag: 'moved' }));
    const cleared = await deferOnto(db, new t.NeverTrigger({ file, tag: 'cleared' }));
    const tr = await triggerer(db);
    await waitFor(() => readFileSync(file, 'utf8').includes('start cleared') && readFileSync(file, 'utf8').includes('start moved'), { what: 'both started' });
    const storage = openStores(db);
    const otherJob = await storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'elsewhere', pid: 1, capacity: 10 });
    await db.db.updateTable('trigger').set({ triggerer_id: otherJob }).where('id', '=', moved.triggerId).execute();
    expect(await storage.taskInstances.clearTaskInstances([{ id: cleared.id, retries: 2 }])).toEqual({ cleared: 1, deletedTriggers: 1 });

    await waitFor(() => readFileSync(file, 'utf8').includes('cleanup moved') && readFileSync(file, 'utf8').includes('cleanup cleared'), { what: 'cleanups' });
    const lines = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.split(' ').slice(0, 2).join(' '));
    expect(lines.filter((line) => !line.startsWith('start'))).toEqual(expect.arrayContaining(['kill cleared', 'cleanup cleared', 'cleanup moved']));
    expect(lines).not.toContain('kill moved');
    expect(lines.indexOf('kill cleared')).toBeLessThan(lines.indexOf('cleanup cleared'));
    expect(tr.triggerer.heldTriggerIds).toEqual([]);
    expect((await taskInstance(db, moved.id)).state).toBe('deferred');
    const clearedRow = await taskInstance(db, cleared.id);
    expect(clearedRow).toMatchObject({ state: null, trigger_id: null, next_method: null, next_kwargs: null, max_tries: 2 });
  });

  it('aborts the signal of a cancelled trigger, whether run() takes it as a parameter or reads this.signal', async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-signal-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    await deferOnto(db, new t.SignalWaitTrigger({ file, tag: 'parameter', source: 'parameter' }));
    await deferOnto(db, new t.SignalWaitTrigger({ file, tag: 'getter', source: 'getter' }));
    await deferOnto(db, new t.LazySignalWaitTrigger({ file, tag: 'lazy' }));
    const tr = await startTriggerer(db);
    await waitFor(() => tr.triggerer.heldTriggerIds.length === 3, { what: 'all three running' });
    await tr.stop();
    const lines = readFileSync(file, 'utf8').trim().split('\n').sort();
    expect(lines).toEqual(['aborted getter AbortError', 'aborted lazy AbortError args=0', 'aborted parameter AbortError']);
  });

  it('a graceful stop cleans up, hands triggers back and ends its job row', async () => {
    const db = await database();
    const file = path.join(os.tmpdir(), `deferflow-stop-${process.pid}-${Date.now()}.log`);
    writeFileSync(file, '');
    const ti = await deferOnto(db, new t.NeverTrigger({ file, tag: 'held' }));
    const tr = await startTriggerer(db);
    await waitFor(() => readFileSync(file, 'utf8').includes('start held'));
    await tr.stop();
    expect(readFileSync(file, 'utf8')).toContain('cleanup held');
    const trigger = await db.db.selectFrom('trigger').selectAll().where('id', '=', ti.triggerId).executeTakeFirstOrThrow();
    expect(trigger.triggerer_id).toBeNull();
    const job = await db.db.selectFrom('job').selectAll().where('id', '=', tr.triggerer.jobId!).executeTakeFirstOrThrow();
    expect(job.state).toBe('success');
    expect(job.end_date).not.toBeNull();
    expect((await taskInstance(db, ti.id)).state).toBe('deferred');
  });
});
