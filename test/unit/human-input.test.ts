// Human input's rules and its storage operations, on both dialects, judged by database rows: the
// question a response must answer, the signed link, and the races (two responses at once, a
// response against the deadline, a response while the try still runs, a clear, a retried try).
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { checkAnswer, checkQuestion, fieldValueFromText, type InputQuestion } from '../../src/model/human-input.ts';
import { signInputToken, verifyInputToken } from '../../src/services/human-input/input-links.ts';
import { InputService } from '../../src/services/human-input/input-service.ts';
import { openStores, type Stores } from '../../src/storage/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, type TestDatabase } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

const approval = checkQuestion({ subject: 'Ship it?', options: ['approve', 'reject'], defaults: { chosen: ['reject'] } });

describe('a question and the answers it takes', () => {
  it('refuses a question it cannot ask, naming what is wrong (DF_INVALID_INPUT_REQUEST)', () => {
    const refused = (raw: Parameters<typeof checkQuestion>[0]) => {
      try {
        checkQuestion(raw);
      } catch (error) {
        expect((error as { code: string }).code).toBe('DF_INVALID_INPUT_REQUEST');
        return (error as Error).message;
      }
      throw new Error('accepted');
    };
    expect(refused({ subject: '' })).toMatch(/subject/);
    expect(refused({ subject: 'x' })).toMatch(/give options, fields, or both/);
    expect(refused({ subject: 'x', options: ['a', 'a'] })).toMatch(/repeat/);
    expect(refused({ subject: 'x', fields: [{ name: 'n', type: 'date' }] })).toMatch(/type must be one of/);
    expect(refused({ subject: 'x', fields: [{ name: 'c', type: 'choice' }] })).toMatch(/needs choices/);
    expect(refused({ subject: 'x', fields: [{ name: 'n', type: 'number', default: 'three' }] })).toMatch(/default/);
    expect(refused({ subject: 'x', options: ['a'], defaults: { chosen: ['b'] } })).toMatch(/defaults do not answer/);
  });

  it('takes an answer of offered options and typed fields, filling defaults; refuses the rest (DF_INVALID_INPUT_RESPONSE)', () => {
    const form = checkQuestion({
      subject: 'Settings',
      fields: [
        { name: 'replicas', type: 'number', default: 3 },
        { name: 'region', type: 'choice', choices: ['eu', 'us'] },
        { name: 'note', type: 'text', required: false },
      ],
    });
    expect(checkAnswer(form, { values: { region: 'us' } })).toEqual({ chosen: [], values: { replicas: 3, region: 'us' } });
    expect(() => checkAnswer(form, { values: {} })).toThrow(/region, which is required/);
    expect(() => checkAnswer(form, { values: { region: 'asia' } })).toThrow(/expected one of eu, us/);
    expect(() => checkAnswer(form, { values: { region: 'eu', replicas: '3' } })).toThrow(/expected a number/);
    expect(() => checkAnswer(form, { values: { region: 'eu', colour: 'red' } })).toThrow(/does not have/);
    expect(() => checkAnswer(approval, { chosen: [] })).toThrow(/must choose one option/);
    expect(() => checkAnswer(approval, { chosen: ['approve', 'reject'] })).toThrow(/only one may be chosen/);
    expect(() => checkAnswer(approval, { chosen: ['maybe'] })).toThrow(/not offered/);
    const several = checkQuestion({ subject: 'Which?', options: ['a', 'b', 'c'], multiple: true });
    expect(checkAnswer(several, { chosen: ['a', 'c'] }).chosen).toEqual(['a', 'c']);
    expect(fieldValueFromText(form, 'replicas', '5')).toBe(5);
    expect(fieldValueFromText(form, 'replicas', '')).toBeUndefined();
    expect(() => fieldValueFromText(form, 'replicas', 'five')).toThrow(/takes a number/);
  });
});

describe('signed input links', () => {
  const key = Buffer.alloc(32, 7);
  const claims = { taskInstanceId: 42, tryNumber: 2, nonce: 'abcdefghijklmnopqrstuv', expiresAt: 2_000_000_000_000 };

  it('verifies what it signed, until it expires; refuses an altered token or another key', () => {
    const token = signInputToken(key, claims);
    expect(verifyInputToken(key, token, 1_000)).toEqual(claims);
    const refusal = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return { code: (error as { code: string }).code, reason: (error as { reason: string }).reason };
      }
      return null;
    };
    expect(refusal(() => verifyInputToken(key, token, claims.expiresAt))).toEqual({ code: 'DF_INPUT_LINK_INVALID', reason: 'expired' });
    expect(refusal(() => verifyInputToken(Buffer.alloc(32, 8), token, 1_000))).toEqual({ code: 'DF_INPUT_LINK_INVALID', reason: 'signature' });
    // Another task instance, the same signature.
    expect(refusal(() => verifyInputToken(key, token.replace(/^42\./, '43.'), 1_000))).toEqual({ code: 'DF_INPUT_LINK_INVALID', reason: 'signature' });
    expect(refusal(() => verifyInputToken(key, token.slice(0, -3), 1_000))).toEqual({ code: 'DF_INPUT_LINK_INVALID', reason: 'signature' });
    expect(verifyInputToken(key, signInputToken(key, { ...claims, expiresAt: null }), Number.MAX_SAFE_INTEGER).expiresAt).toBeNull();
  });
});

describe.each(testDialects)('human input storage on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });
  const database = async (): Promise<TestDatabase> => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };

  /** A task instance running on a worker, as a worker starts it: what asks. */
  async function running(storage: Stores, db: TestDatabase) {
    const id = await createTaskInstance(db, { state: 'scheduled' });
    const jobId = await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 4 });
    await storage.taskInstances.claimTaskInstances({ jobId, hostname: 'h', pid: 1 }, 10);
    const started = (await storage.taskInstances.startTaskInstance(id, jobId, null))!;
    return { id, held: { workerJobId: jobId, tryNumber: started.tryNumber } };
  }

  async function awaiting(storage: Stores, db: TestDatabase, question: InputQuestion = approval, timeoutMs: number | null = null, now = Date.now()) {
    const ti = await running(storage, db);
    const ask = await storage.inputs.askForInput({ taskInstanceId: ti.id, held: ti.held, question, timeoutMs }, now);
    expect(ask.asked).not.toBeNull();
    expect(await storage.inputs.awaitInput(ti.id, ti.held, { method: 'decided', kwargs: { k: 1 } }, now)).toBe('awaiting');
    return { ...ti, asked: ask.asked! };
  }

  it('awaits with no slot and no trigger; of two responses at once exactly one wins, and the try resumes with it', async () => {
    const db = await database();
    const storage = openStores(db);
    const { id, held } = await awaiting(storage, db);
    expect(await taskInstance(db, id)).toMatchObject({ state: 'awaiting_input', worker_job_id: null, trigger_id: null, next_method: 'decided' });
    const outcomes = await Promise.allSettled([
      storage.inputs.respondToInput({ taskInstanceId: id, chosen: ['approve'], values: {}, by: 'alice', source: 'cli' }),
      storage.inputs.respondToInput({ taskInstanceId: id, chosen: ['reject'], values: {}, by: 'bob', source: 'http' }),
    ]);
    const won = outcomes.filter((outcome) => outcome.status === 'fulfilled');
    const lost = outcomes.filter((outcome) => outcome.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect((lost[0]!.reason as { code: string }).code).toBe('DF_INPUT_ALREADY_GIVEN');
    const winner = (won[0] as PromiseFulfilledResult<{ by: string; chosen: readonly string[] }>).value;
    expect((lost[0]!.reason as Error).message).toContain(winner.by);
    const row = await taskInstance(db, id);
    expect(row).toMatchObject({ state: 'scheduled', next_method: 'decided', next_kwargs: { k: 1 } });
    expect(row.next_event).toMatchObject({ by: winner.by, chosen: winner.chosen });
    // The worker resumes it in the same try, at the method, with the response as its event.
    const jobId = held.workerJobId;
    await storage.taskInstances.claimTaskInstances({ jobId, hostname: 'h', pid: 1 }, 10);
    const resumed = (await storage.taskInstances.startTaskInstance(id, jobId, null))!;
    expect(resumed.tryNumber).toBe(held.tryNumber);
    expect(resumed.nextMethod).toBe('decided');
    expect(JSON.parse(resumed.nextKwargsJson!)).toMatchObject({ k: 1, event: { by: winner.by } });
  });

  it('a response that comes while the asking try still runs is kept, and the try resumes at once', async () => {
    const db = await database();
    const storage = openStores(db);
    const ti = await running(storage, db);
    await storage.inputs.askForInput({ taskInstanceId: ti.id, held: ti.held, question: approval, timeoutMs: null });
    await storage.inputs.respondToInput({ taskInstanceId: ti.id, chosen: ['approve'], values: {}, by: 'quick', source: 'api' });
    expect((await taskInstance(db, ti.id)).state).toBe('running');
    expect(await storage.inputs.awaitInput(ti.id, ti.held, { method: 'decided', kwargs: {} })).toBe('answered');
    expect(await taskInstance(db, ti.id)).toMatchObject({ state: 'scheduled', next_method: 'decided', next_event: { by: 'quick', chosen: ['approve'] } });
  });

  it('at the deadline the defaults answer (recorded as the timeout); a response after it is refused; with no defaults the task resumes to fail', async () => {
    const db = await database();
    const storage = openStores(db);
    const now = Date.now();
    const withDefaults = await awaiting(storage, db, approval, 1_000, now);
    const withoutDefaults = await awaiting(storage, db, checkQuestion({ subject: 'Number?', fields: [{ name: 'n', type: 'number' }] }), 1_000, now);
    // Not yet due: the sweep leaves both.
    expect(await storage.inputs.timeOutAwaitedInput(now + 999)).toEqual({ answeredByDefaults: 0, failed: 0 });
    expect(await storage.taskInstances.nextReadyAt()).toBe(now + 1_000);
    await expect(
      storage.inputs.respondToInput({ taskInstanceId: withDefaults.id, chosen: ['approve'], values: {}, by: 'late', source: 'cli' }, now + 1_000),
    ).rejects.toMatchObject({
      code: 'DF_NOT_AWAITING_INPUT',
    });
    expect(await storage.inputs.timeOutAwaitedInput(now + 1_000)).toEqual({ answeredByDefaults: 1, failed: 1 });
    expect(await taskInstance(db, withDefaults.id)).toMatchObject({
      state: 'scheduled',
      next_method: 'decided',
      next_event: { chosen: ['reject'], by: 'timeout', source: 'timeout' },
    });
    const failed = await taskInstance(db, withoutDefaults.id);
    expect(failed).toMatchObject({ state: 'scheduled', next_method: '__fail__', next_kwargs: { code: 'DF_INPUT_TIMEOUT', reason: 'input_timeout' } });
    expect(await storage.inputs.timeOutAwaitedInput(now + 5_000)).toEqual({ answeredByDefaults: 0, failed: 0 });
  });

  it("a clear takes the question with it: the response is refused and the link's question is gone; a retried try neither asks nor waits", async () => {
    const db = await database();
    const storage = openStores(db);
    const inputs = new InputService(storage);
    const { id, asked, held } = await awaiting(storage, db);
    const token = await inputs.tokenFor(asked);
    expect((await inputs.questionOfLink(token)).question.subject).toBe('Ship it?');
    await storage.taskInstances.clearTaskInstances([{ id, retries: 0 }], {});
    await expect(inputs.respondByLink(token, { chosen: ['approve'], by: 'alice' })).rejects.toMatchObject({ code: 'DF_INPUT_LINK_INVALID', reason: 'stale' });
    await expect(inputs.respond(id, { chosen: ['approve'], by: 'alice' }, 'cli')).rejects.toMatchObject({ code: 'DF_NOT_AWAITING_INPUT' });
    expect((await taskInstance(db, id)).state).toBeNull();
    // The cleared try, still running somewhere, can no longer ask or wait.
    expect((await storage.inputs.askForInput({ taskInstanceId: id, held, question: approval, timeoutMs: null })).asked).toBeNull();
    await expect(storage.inputs.awaitInput(id, held, { method: 'decided', kwargs: {} })).rejects.toMatchObject({ code: 'DF_TASK_INSTANCE_STATE' });
  });

  it('a task instance marked or stopped while it awaits input refuses its links: its question is no longer asked', async () => {
    const db = await database();
    const storage = openStores(db);
    const inputs = new InputService(storage);
    const { id, asked } = await awaiting(storage, db);
    const token = await inputs.tokenFor(asked);
    // As a signal's stop (or a person marking it) ends it: the state changes, the question row stays.
    await db.db.updateTable('task_instance').set({ state: 'skipped', ready_at: null }).where('id', '=', id).execute();
    await expect(inputs.respondByLink(token, { chosen: ['approve'], by: 'alice' })).rejects.toMatchObject({ code: 'DF_INPUT_LINK_INVALID', reason: 'stale' });
    expect(await taskInstance(db, id)).toMatchObject({ state: 'skipped', next_event: null });
  });

  it("a link for a replaced question (the task asked again) is refused; the new question's link works", async () => {
    const db = await database();
    const storage = openStores(db);
    const inputs = new InputService(storage);
    const first = await awaiting(storage, db);
    const oldToken = await inputs.tokenFor(first.asked);
    await inputs.respond(first.id, { chosen: ['approve'], by: 'alice' }, 'api');
    await storage.taskInstances.claimTaskInstances({ jobId: first.held.workerJobId, hostname: 'h', pid: 1 }, 10);
    await storage.taskInstances.startTaskInstance(first.id, first.held.workerJobId, null);
    const again = await storage.inputs.askForInput({ taskInstanceId: first.id, held: first.held, question: approval, timeoutMs: null });
    await storage.inputs.awaitInput(first.id, first.held, { method: 'decided', kwargs: {} });
    await expect(inputs.respondByLink(oldToken, { chosen: ['reject'], by: 'mallory' })).rejects.toMatchObject({
      code: 'DF_INPUT_LINK_INVALID',
      reason: 'stale',
    });
    const response = await inputs.respondByLink(await inputs.tokenFor(again.asked!), { chosen: ['reject'], by: 'bob' });
    expect(response).toMatchObject({ chosen: ['reject'], by: 'bob', source: 'link' });
  });
});
