// The worker in-process on both dialects: claimed task instances run, defer, resume, retry and
// time out, judged by their rows. (DAG files and the scheduler come with the task runtime.)
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BaseOperator, Keyring, MAX_TASK_STATE_VALUE_BYTES, type RuntimeContext, type TaskContext } from '../../src/index.ts';
import { taskState } from '../../src/authoring/operators/task-state.ts';
import { taskServices } from '../../src/daemons/worker/dag-file-resolver.ts';
import { openStores } from '../../src/storage/index.ts';
import { NO_RETRIES, type RetryPolicy } from '../../src/model/retry-policy.ts';
import { TASK_LOG_LINE_CAP } from '../../src/daemons/worker/task-log-writer.ts';
import { MAX_RETURN_VALUE_BYTES, Worker, type ResolvedTask, type TaskResolver } from '../../src/daemons/worker/worker.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, LogCapture, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

class ReturnsRows extends BaseOperator {
  execute() {
    return { rows: 3 };
  }
}

/** Fails until its attempt counter reaches `succeedOn`. */
class Flaky extends BaseOperator {
  attempts = 0;
  constructor(readonly succeedOn: number) {
    super();
  }
  execute() {
    this.attempts++;
    if (this.attempts < this.succeedOn) throw new Error(`flaky attempt ${this.attempts}`);
    return 'finally';
  }
}

/** Defers on a trigger, then returns what it was resumed with. */
class DeferThenReport extends BaseOperator {
  constructor(readonly trigger: () => import('../../src/index.ts').BaseTrigger) {
    super();
  }
  execute(): never {
    return this.defer({ trigger: this.trigger(), method: 'report', kwargs: { asked: 'twice' } });
  }
  report(_context: TaskContext, event: unknown, kwargs: Record<string, unknown>) {
    return { event, kwargs };
  }
}

/** Logs `lines` numbered lines through the task's logger. */
class Chatty extends BaseOperator {
  constructor(readonly lines: number) {
    super();
  }
  execute(context: TaskContext & { log: import('pino').Logger }) {
    for (let i = 1; i <= this.lines; i++) context.log.info({ i }, `line ${i}`);
    return this.lines;
  }
}

/** Reschedules itself `times` times, 100 ms ahead, then returns how often it poked. */
class PokesUntil extends BaseOperator {
  pokes = 0;
  constructor(readonly times: number) {
    super();
  }
  execute(): number {
    this.pokes++;
    if (this.pokes <= this.times) this.reschedule(0.1);
    return this.pokes;
  }
}

class SkipsItself extends BaseOperator {
  execute(): never {
    return this.skip('nothing to do today');
  }
}

class ReturnsTooMuch extends BaseOperator {
  execute() {
    return 'x'.repeat(MAX_RETURN_VALUE_BYTES);
  }
}

/** Waits until its signal aborts, then records why and gives up. */
class WaitsForAbort extends BaseOperator {
  readonly reasons: unknown[] = [];
  execute(context: TaskContext & { signal: AbortSignal }) {
    return new Promise((_, reject) =>
      context.signal.addEventListener('abort', () => {
        this.reasons.push(context.signal.reason);
        reject(new Error('stopped as asked'));
      }),
    );
  }
}

/**
 * Counts its tries in its state and fails the first; the second defers, and the resumed method
 * reports what the state holds (one key deleted on the way).
 */
class KeepsState extends BaseOperator {
  async execute(context: RuntimeContext): Promise<never> {
    const tries = ((await context.state.get<number>('tries')) ?? 0) + 1;
    await context.state.set('tries', tries);
    await context.state.set('scratch', { seen: [tries, null], note: 'é' });
    if (tries === 1) throw new Error('first try fails after keeping its state');
    return this.defer({ trigger: new t.DelayTrigger({ ms: 50 }), method: 'resumed' });
  }
  async resumed(context: RuntimeContext) {
    const scratch = await context.state.get('scratch');
    await context.state.delete('scratch');
    await context.state.delete('never-set');
    // undefined (no such key) is not JSON: a return value says null.
    return {
      tries: await context.state.get('tries'),
      scratch,
      deleted: (await context.state.get('scratch')) ?? null,
      missing: (await context.state.get('nope')) ?? null,
    };
  }
}

/** Tries what context.state refuses, and returns each refusal's code. */
class MisusesState extends BaseOperator {
  async execute(context: RuntimeContext) {
    const codeOf = (attempt: () => Promise<unknown>) =>
      attempt().then(
        () => 'accepted',
        (error: { code?: string }) => error.code,
      );
    return {
      emptyKey: await codeOf(() => context.state.set('', 1)),
      longKey: await codeOf(() => context.state.get('k'.repeat(201))),
      tooLarge: await codeOf(() => context.state.set('big', 'x'.repeat(MAX_TASK_STATE_VALUE_BYTES))),
      notJson: await codeOf(() => context.state.set('date', { at: new Date() } as never)),
      largestKept: await codeOf(() => context.state.set('k'.repeat(200), 'x'.repeat(MAX_TASK_STATE_VALUE_BYTES - 2))),
    };
  }
}

class Sleeps extends BaseOperator {
  execute() {
    return new Promise((resolve) => setTimeout(resolve, 60_000));
  }
}

describe.each(testDialects)('worker on %s', (dialect) => {
  const open: { databases: TestDatabase[]; workers: Worker[]; triggerers: TestTriggerer[] } = { databases: [], workers: [], triggerers: [] };
  afterEach(async () => {
    await Promise.all(open.workers.splice(0).map((w) => w.stop()));
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    return db;
  };
  /** A worker whose tasks are `operators[task_id]`. */
  const startWorker = async (
    db: TestDatabase,
    operators: Record<string, BaseOperator>,
    settings: { retry?: RetryPolicy; executionTimeoutMs?: number; concurrency?: number } = {},
  ) => {
    // The database services a worker gives its tasks (the state among them).
    const services = taskServices(db);
    const resolve: TaskResolver = async (ti) => {
      const operator = operators[ti.taskId];
      if (!operator) throw new Error(`no task ${ti.taskId}`);
      const task: ResolvedTask = {
        operator,
        retry: settings.retry ?? NO_RETRIES,
        executionTimeoutMs: settings.executionTimeoutMs ?? null,
        context: (claimed, started, taskLog, signal) => ({
          taskInstance: {
            id: claimed.id,
            dagId: claimed.dagId,
            taskId: claimed.taskId,
            runId: claimed.runId,
            mapIndex: claimed.mapIndex,
            tryNumber: started.tryNumber,
          },
          log: taskLog,
          signal,
          state: taskState(services(claimed, started)),
        }),
      };
      return task;
    };
    const logs = new LogCapture();
    const worker = new Worker(
      db,
      { concurrency: settings.concurrency ?? 4, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 300, hostname: 'test-worker' },
      resolve,
      pino({ level: 'debug' }, logs),
    );
    await worker.start();
    open.workers.push(worker);
    return { worker, logs };
  };
  const scheduled = (db: TestDatabase, taskId: string) => createTaskInstance(db, { state: 'scheduled', taskId });
  const stateOf = async (db: TestDatabase, id: number) => (await taskInstance(db, id)).state;

  it("keeps a try's log lines in the database, complete when the task is, up to the cap", async () => {
    const db = await database();
    const short = await scheduled(db, 'short');
    const long = await scheduled(db, 'long');
    const { worker, logs } = await startWorker(db, { short: new Chatty(3), long: new Chatty(TASK_LOG_LINE_CAP + 5) });
    await waitFor(async () => (await stateOf(db, short)) === 'success' && (await stateOf(db, long)) === 'success', {
      what: 'both to succeed',
      timeoutMs: 20_000,
    });

    const shortLog = await worker.storage.logs.readTaskLog(short, 1);
    expect(shortLog.map((line) => [line.level, line.message])).toEqual([
      ['info', expect.stringMatching(/^running .*short.*, try 1$/)],
      ['info', 'line 1'],
      ['info', 'line 2'],
      ['info', 'line 3'],
      ['info', expect.stringMatching(/short .* success$/)],
    ]);
    expect(JSON.parse(shortLog[1]!.fieldsJson!)).toEqual({ i: 1 });
    // The lines reach the worker's own log too, bound to the task instance.
    expect(logs.matching((line) => line.msg === 'line 2' && line.task_instance_id === short && line.try_number === 1)).toHaveLength(1);

    const longLog = await worker.storage.logs.readTaskLog(long, 1);
    // The worker's running line, the task's first TASK_LOG_LINE_CAP lines, the cap line, and the
    // worker's outcome line, which the cap does not hold back.
    expect(longLog).toHaveLength(TASK_LOG_LINE_CAP + 3);
    expect(longLog.at(-2)).toMatchObject({ level: 'warn', message: expect.stringContaining(`task log cap reached (${TASK_LOG_LINE_CAP} lines`) });
    expect(longLog.at(-1)).toMatchObject({ level: 'info', message: expect.stringMatching(/long .* success$/) });
    expect(await worker.storage.logs.readTaskLog(long, 2)).toEqual([]);
  }, 30_000);

  it('a task may skip itself, reschedule itself without spending a try, and is failed for a return value over the cap', async () => {
    const db = await database();
    const skipped = await scheduled(db, 'skip');
    const poked = await scheduled(db, 'poke');
    const huge = await scheduled(db, 'huge');
    const { worker, logs } = await startWorker(db, { skip: new SkipsItself(), poke: new PokesUntil(2), huge: new ReturnsTooMuch() });
    await waitFor(
      async () => (await stateOf(db, skipped)) === 'skipped' && (await stateOf(db, huge)) === 'failed' && (await stateOf(db, poked)) === 'up_for_reschedule',
      {
        what: 'skip, failure and the first reschedule',
      },
    );
    expect((await worker.storage.logs.readTaskLog(skipped, 1)).at(-1)?.message).toMatch(/skipped: nothing to do today$/);
    const failure = (await worker.storage.logs.readTaskLog(huge, 1)).at(-1)!;
    expect(failure.level).toBe('error');
    expect(JSON.parse(failure.fieldsJson!).error).toContain('ReturnValueTooLargeError: ');
    expect(failure.message).toContain(`returned ${MAX_RETURN_VALUE_BYTES + 2} bytes of JSON; a task instance keeps at most ${MAX_RETURN_VALUE_BYTES}`);

    // Rescheduled twice (up_for_reschedule, ready 100 ms later), then done: still try 1.
    expect(await stateOf(db, poked)).toBe('up_for_reschedule');
    const rescheduledRow = await taskInstance(db, poked);
    expect(rescheduledRow.try_number).toBe(0);
    expect(new Date(rescheduledRow.ready_at!).getTime()).toBeGreaterThan(Date.now() - 1000);
    const storage = worker.storage;
    await waitFor(
      async () => {
        await storage.taskInstances.scheduleReadyTaskInstances();
        return (await stateOf(db, poked)) === 'success';
      },
      { what: 'the third poke' },
    );
    const done = await taskInstance(db, poked);
    expect(done.try_number).toBe(1);
    expect(JSON.parse(done.return_value!)).toBe(3);
    expect(logs.matching((line) => line.task_instance_id === poked && String(line.msg).includes('up_for_reschedule: runs again at'))).toHaveLength(2);
  });

  it("aborts a running task's signal at its execution timeout and when shutdown gives up on it", async () => {
    const db = await database();
    const timed = new WaitsForAbort();
    const timedOut = await scheduled(db, 'timed');
    const first = await startWorker(db, { timed }, { executionTimeoutMs: 300 });
    await waitFor(async () => (await stateOf(db, timedOut)) === 'failed', { what: 'the timeout' });
    expect(timed.reasons).toHaveLength(1);
    expect((timed.reasons[0] as Error).message).toMatch(/ran past its execution timeout/);
    // Else it could claim the next task, which it has no code for, and fail it.
    await first.worker.stop();

    const patient = new WaitsForAbort();
    const handedBack = await scheduled(db, 'patient');
    const { worker } = await startWorker(db, { patient });
    await waitFor(async () => (await stateOf(db, handedBack)) === 'running', { what: 'the task running' });
    await worker.stop();
    expect(await stateOf(db, handedBack)).toBe('scheduled');
    expect((patient.reasons[0] as Error).message).toBe('the worker is shutting down; this try is handed back and runs again');
  });

  it('runs a scheduled task instance to success and keeps its return value', async () => {
    const db = await database();
    const id = await scheduled(db, 'rows');
    const { worker } = await startWorker(db, { rows: new ReturnsRows() });
    await waitFor(async () => (await stateOf(db, id)) === 'success', { what: 'success' });
    const row = await taskInstance(db, id);
    expect(row).toMatchObject({ try_number: 1, hostname: 'test-worker', worker_job_id: null });
    expect(JSON.parse(row.return_value!)).toEqual({ rows: 3 });
    expect(worker.runningCount).toBe(0);
  });

  it('retries a failing task after its delay, then succeeds; a task with no retries left fails', async () => {
    const db = await database();
    const flaky = new Flaky(2);
    const doomed = new Flaky(99);
    const flakyId = await scheduled(db, 'flaky');
    const doomedId = await scheduled(db, 'doomed');
    const { logs } = await startWorker(db, { flaky, doomed }, { retry: { retries: 1, retryDelayMs: 200, exponentialBackoff: false, maxRetryDelayMs: null } });

    await waitFor(async () => (await stateOf(db, flakyId)) === 'up_for_retry' && (await stateOf(db, doomedId)) === 'up_for_retry', {
      what: 'the first failures',
    });
    const waiting = await taskInstance(db, flakyId);
    expect(new Date(waiting.ready_at!).getTime() - new Date(waiting.updated_at!).getTime()).toBe(200);
    const storage = open.workers[0]!.storage;
    // Either may have failed first (under load, milliseconds apart): neither is ready before the earlier ready_at.
    const firstReadyAt = Math.min(new Date(waiting.ready_at!).getTime(), new Date((await taskInstance(db, doomedId)).ready_at!).getTime());
    expect(await storage.taskInstances.scheduleReadyTaskInstances(firstReadyAt - 1)).toBe(0);

    // Do the scheduler's part until both are done: retries go back to scheduled once ready.
    const finished = ['success', 'failed'];
    await waitFor(
      async () => {
        await storage.taskInstances.scheduleReadyTaskInstances();
        return finished.includes((await stateOf(db, flakyId))!) && finished.includes((await stateOf(db, doomedId))!);
      },
      { what: 'both tasks finished' },
    );
    expect(await taskInstance(db, flakyId)).toMatchObject({ state: 'success', try_number: 2 });
    expect(await taskInstance(db, doomedId)).toMatchObject({ state: 'failed', try_number: 2 });
    const doomedLines = await logs.waitForLines((l) => l.task_instance_id === doomedId && typeof l.error === 'string', {
      atLeast: 2,
      what: "the doomed task's two failure lines",
    });
    expect(doomedLines.map((l) => [l.state, l.error])).toEqual([
      ['up_for_retry', 'Error: flaky attempt 1'],
      ['failed', 'Error: flaky attempt 2'],
    ]);
  });

  it('context.state keeps JSON values across tries and deferrals, by key; a try that no longer holds its task instance writes nothing', async () => {
    const db = await database();
    const id = await scheduled(db, 'stateful');
    await startWorker(db, { stateful: new KeepsState() }, { retry: { retries: 1, retryDelayMs: 0, exponentialBackoff: false, maxRetryDelayMs: null } });
    open.triggerers.push(await startTriggerer(db));
    const storage = openStores(db);
    await waitFor(
      async () => {
        await storage.taskInstances.scheduleReadyTaskInstances();
        return (await stateOf(db, id)) === 'success';
      },
      { what: 'the second try resumed and done' },
    );
    const row = await taskInstance(db, id);
    expect(row.try_number).toBe(2);
    expect(JSON.parse(row.return_value!)).toEqual({ tries: 2, scratch: { seen: [2, null], note: 'é' }, deleted: null, missing: null });
    const kept = await storage.taskInstances.listTaskState(id);
    expect(kept.map(({ key, json, tryNumber }) => ({ key, json, tryNumber }))).toEqual([{ key: 'tries', json: '2', tryNumber: 2 }]);

    // The task instance is done: no try holds it, so no write lands (its code would get DF_TRY_TAKEN_OVER).
    const lastHeld = { workerJobId: open.workers[0]!.jobId!, tryNumber: 2 };
    expect(await storage.taskInstances.writeTaskState({ taskInstanceId: id, held: lastHeld, key: 'late', json: '1' })).toEqual({
      written: false,
      now: 'success, try 2',
    });
    expect(await storage.taskInstances.writeTaskState({ taskInstanceId: 987_654, held: lastHeld, key: 'late', json: '1' })).toEqual({
      written: false,
      now: 'deleted',
    });
    expect((await storage.taskInstances.listTaskState(id)).map((entry) => entry.key)).toEqual(['tries']);

    // A clear forgets the state unless asked to keep it.
    await storage.taskInstances.clearTaskInstances([{ id, retries: 0 }], { keepState: true });
    expect(await storage.taskInstances.readTaskStateValue(id, 'tries')).toBe('2');
    await storage.taskInstances.clearTaskInstances([{ id, retries: 0 }]);
    expect(await storage.taskInstances.readTaskStateValue(id, 'tries')).toBe(null);
  });

  it('context.state refuses a bad key, a value over 64 KiB and a value that is not JSON, each with its code, and writes none of them', async () => {
    const db = await database();
    const id = await scheduled(db, 'misuse');
    await startWorker(db, { misuse: new MisusesState() });
    await waitFor(async () => (await stateOf(db, id)) === 'success', { what: 'the task' });
    expect(JSON.parse((await taskInstance(db, id)).return_value!)).toEqual({
      emptyKey: 'DF_INVALID_TASK_STATE',
      longKey: 'DF_INVALID_TASK_STATE',
      tooLarge: 'DF_INVALID_TASK_STATE',
      notJson: 'DF_NOT_JSON',
      largestKept: 'accepted',
    });
    expect((await openStores(db).taskInstances.listTaskState(id)).map((entry) => entry.key)).toEqual(['k'.repeat(200)]);
  });

  it('with encryption on, task state values are sealed in the database and open with the keys', async () => {
    const db = await database();
    const id = await createTaskInstance(db, { state: 'running', taskId: 'sealed' });
    await db.db.updateTable('task_instance').set({ try_number: 1, worker_job_id: 7 }).where('id', '=', id).execute();
    const keyring = Keyring.fromEntries([Keyring.generateEntry('k1')], 'test');
    const sealedStores = openStores({ ...db, keyring });
    const write = (workerJobId: number) =>
      sealedStores.taskInstances.writeTaskState({ taskInstanceId: id, held: { workerJobId, tryNumber: 1 }, key: 'token', json: '{"secret":"hunter2"}' });
    // The same try number on another worker is not the try that holds it (see held-try.ts).
    expect(await write(8)).toEqual({ written: false, now: 'running, try 1, on worker 7' });
    expect(await write(7)).toEqual({ written: true });
    const stored = await db.db.selectFrom('task_state').select('value').executeTakeFirstOrThrow();
    expect(Keyring.sealedWith(stored.value)).toBe('k1');
    expect(Keyring.textForm(stored.value)).not.toContain('hunter2');
    expect(await sealedStores.taskInstances.readTaskStateValue(id, 'token')).toBe('{"secret":"hunter2"}');
    // Without the key it is refused, naming the row, not read as something else.
    await expect(openStores(db).taskInstances.readTaskStateValue(id, 'token')).rejects.toMatchObject({ code: 'DF_ENCRYPTION_KEY' });
  });

  it('a deferring task frees its slot, and resumes at next_method with the event once the trigger fires', async () => {
    const db = await database();
    const id = await scheduled(db, 'waits');
    const { worker } = await startWorker(
      db,
      { waits: new DeferThenReport(() => new t.DelayTrigger({ ms: 400 })), rows: new ReturnsRows() },
      { concurrency: 1 },
    );
    await waitFor(async () => (await stateOf(db, id)) === 'deferred', { what: 'the deferral' });
    expect(worker.runningCount).toBe(0);
    // The one slot is free while it waits: another task runs to the end meanwhile.
    const other = await scheduled(db, 'rows');
    await waitFor(async () => (await stateOf(db, other)) === 'success', { what: 'the other task in the freed slot' });
    expect(await stateOf(db, id)).toBe('deferred');
    open.triggerers.push(await startTriggerer(db));
    await waitFor(async () => (await stateOf(db, id)) === 'success', { what: 'the resumed task' });
    const row = await taskInstance(db, id);
    expect(JSON.parse(row.return_value!)).toEqual({ event: { slept: 400 }, kwargs: { asked: 'twice' } });
    expect(row.try_number).toBe(1);
  });

  it('execution_timeout spans the deferral: a trigger that never fires fails the task at the deadline', async () => {
    const db = await database();
    const id = await scheduled(db, 'forever');
    const { logs } = await startWorker(db, { forever: new DeferThenReport(() => new t.NeverTrigger({})) }, { executionTimeoutMs: 1000 });
    open.triggerers.push(await startTriggerer(db));
    await waitFor(async () => (await stateOf(db, id)) === 'deferred');
    const deferred = await taskInstance(db, id);
    expect(new Date(deferred.trigger_timeout!).getTime()).toBe(new Date(deferred.execution_deadline!).getTime());
    await waitFor(async () => (await stateOf(db, id)) === 'failed', { what: 'the timeout failing the task', timeoutMs: 5000 });
    const failed = await taskInstance(db, id);
    expect(new Date(failed.end_date!).getTime()).toBeGreaterThanOrEqual(new Date(deferred.execution_deadline!).getTime());
    const [failure] = await logs.waitForLines((l) => l.task_instance_id === id && l.state === 'failed', { what: 'the failure logged' });
    expect(String(failure!.error)).toMatch(/^TaskExecutionTimeoutError: test_dag\.forever .* ran past its execution timeout/);
  });

  it('a stop hands a task that does not finish in the grace period back with its try: the next run is the same try', async () => {
    const db = await database();
    const id = await scheduled(db, 'sleeps');
    const { worker } = await startWorker(db, { sleeps: new Sleeps() });
    await waitFor(async () => (await stateOf(db, id)) === 'running');
    await worker.stop();
    const row = await taskInstance(db, id);
    expect(row).toMatchObject({ state: 'scheduled', worker_job_id: null, try_number: 0 });
    const job = await db.db.selectFrom('job').selectAll().where('id', '=', worker.jobId!).executeTakeFirstOrThrow();
    expect(job).toMatchObject({ job_type: 'WorkerJob', state: 'success' });
    // The next worker runs it as try 1 again: an operator stopping a process spends no retry.
    const next = await startWorker(db, { sleeps: new Sleeps() });
    await waitFor(async () => (await taskInstance(db, id)).state === 'running', { what: 'the task running again' });
    expect((await taskInstance(db, id)).try_number).toBe(1);
    await next.worker.stop();
  });
});
