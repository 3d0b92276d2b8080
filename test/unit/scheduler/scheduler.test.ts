// Scheduler, worker and triggerer together in one process, on both dialects: DAG runs move
// through their tasks by trigger rules, deferrals free slots, start-from-trigger tasks need no
// worker, dead workers' tasks are retried. DAG structure comes from a SchedulerDag, as the
// scheduler reads it from serialized DAGs.
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BaseOperator, type TaskContext } from '../../../src/index.ts';
import { Scheduler } from '../../../src/daemons/scheduler/scheduler.ts';
import { Metrics } from '../../../src/services/observability/metrics.ts';
import { WOKEN_PASS_PACING } from '../../../src/services/jobs/daemon.ts';
import type { SchedulerDag, SchedulerTask } from '../../../src/model/scheduler-dag.ts';
import { NO_RETRIES } from '../../../src/model/retry-policy.ts';
import { Worker, type TaskResolver } from '../../../src/daemons/worker/worker.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { LogCapture, migratedDatabase, parsePlain, type TestDatabase, waitFor } from '../../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

class Returns extends BaseOperator {
  constructor(readonly value: unknown) {
    super();
  }
  execute() {
    return this.value;
  }
}
class Fails extends BaseOperator {
  execute(): never {
    throw new Error('extract failed');
  }
}
class WaitsThenReturns extends BaseOperator {
  execute(): never {
    return this.defer({ trigger: new t.DelayTrigger({ ms: 300 }), method: 'done' });
  }
  done(_context: TaskContext, event: unknown) {
    return { resumedWith: event };
  }
}
/** Resumed only: it starts from a trigger, so execute() must never run. */
class StartsFromTrigger extends BaseOperator {
  execute(): never {
    throw new Error('execute() ran for a start-from-trigger task');
  }
  fired(_context: TaskContext, event: unknown, kwargs: Record<string, unknown>) {
    return { event, kwargs };
  }
}

const task = (taskId: string, upstreamTaskIds: string[] = [], more: Partial<SchedulerTask> = {}): SchedulerTask => ({
  taskId,
  operator: 'TestOperator',
  upstreamTaskIds,
  triggerRule: 'all_success',
  retry: NO_RETRIES,
  priorityWeight: 1,
  startTrigger: null,
  signalActions: [],
  queue: 'default',
  ...more,
});

describe.each(testDialects)('scheduler on %s', (dialect) => {
  const open: { databases: TestDatabase[]; stops: (() => Promise<void>)[]; triggerers: TestTriggerer[] } = { databases: [], stops: [], triggerers: [] };
  afterEach(async () => {
    for (const stop of open.stops.splice(0).reverse()) await stop();
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });

  /** A database, a scheduler that knows `dag`, a worker running `operators`, a triggerer. */
  async function runtime(dag: SchedulerDag, operators: Record<string, BaseOperator>, { zombieThresholdMs = 30_000 } = {}) {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const logs = new LogCapture();
    const log = pino({ level: 'debug' }, logs);
    const scheduler = new Scheduler(
      db,
      { pollIntervalMs: 50, heartbeatIntervalMs: 500, zombieThresholdMs, runsPerPass: 100, hostname: 'test' },
      async (id) => (id === dag.dagId ? dag : null),
      log,
    );
    const resolve: TaskResolver = async (ti) => ({
      operator: operators[ti.taskId]!,
      retry: NO_RETRIES,
      executionTimeoutMs: null,
      context: (claimed, started) => ({
        taskInstance: {
          id: claimed.id,
          dagId: claimed.dagId,
          taskId: claimed.taskId,
          runId: claimed.runId,
          mapIndex: claimed.mapIndex,
          tryNumber: started.tryNumber,
        },
      }),
    });
    const worker = new Worker(
      db,
      { concurrency: 2, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 300, hostname: 'test-worker' },
      resolve,
      log,
    );
    return {
      db,
      logs,
      scheduler,
      worker,
      start: async () => {
        await scheduler.start();
        open.stops.push(() => scheduler.stop());
        await worker.start();
        open.stops.push(() => worker.stop());
        open.triggerers.push(await startTriggerer(db));
      },
      run: (runId: string) => scheduler.storage.dagRuns.createDagRun(dag, { runId, runType: 'manual', logicalDate: Date.now(), conf: {} }),
      states: async (runId: string) =>
        Object.fromEntries((await scheduler.storage.dagRuns.taskInstancesOfRun(dag.dagId, runId)).map((ti) => [ti.taskId, ti.state])),
      runState: async (runId: string) => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state,
    };
  }

  it('serves a storm of wake-ups (one per finished task) with a pass per gap after a short burst, not a pass each', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const metrics = new Metrics();
    // A poll interval far longer than the storm: every pass in it was started by a wake-up.
    const scheduler = new Scheduler(
      db,
      { pollIntervalMs: 30_000, heartbeatIntervalMs: 500, zombieThresholdMs: 30_000, runsPerPass: 100, hostname: 'test' },
      async () => null,
      pino({ level: 'silent' }),
      { metrics },
    );
    // Passes so far, as /metrics shows them.
    const passes = async () => Number(/^deferflow_scheduler_loop_duration_seconds_count (\d+)$/m.exec(await metrics.registry.metrics())?.[1] ?? 0);
    await scheduler.start();
    open.stops.push(() => scheduler.stop());
    // The first pass, and on PostgreSQL the one LISTEN's first connection asks for.
    await waitFor(async () => (await passes()) >= 1, { what: 'the first pass' });
    const before = await passes();
    const from = performance.now();
    let wakes = 0;
    while (performance.now() - from < 1500) {
      scheduler.wake();
      wakes++;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const elapsedMs = performance.now() - from;
    const inStorm = (await passes()) - before;
    // At most a burst, then one pass per gap (and one under way as the storm began); a slow
    // machine makes fewer, never more. Unpaced: 449.
    const { burst, gapMs } = WOKEN_PASS_PACING;
    expect(inStorm).toBeLessThanOrEqual(burst + Math.ceil(elapsedMs / gapMs) + 1);
    expect(inStorm).toBeGreaterThanOrEqual(2);
    expect(wakes).toBeGreaterThan(inStorm * 3);
  });

  it('runs a DAG run through its dependencies, a deferral in the middle, to success', async () => {
    const dag: SchedulerDag = {
      dagId: 'etl',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [task('extract'), task('wait', ['extract']), task('load', ['wait'])],
    };
    const rt = await runtime(dag, { extract: new Returns(1), wait: new WaitsThenReturns(), load: new Returns('loaded') });
    await rt.run('manual__1');
    await rt.start();
    await waitFor(async () => (await rt.runState('manual__1')) === 'success', { what: 'the run to succeed' });
    expect(await rt.states('manual__1')).toEqual({ extract: 'success', wait: 'success', load: 'success' });
    const rows = await rt.db.db.selectFrom('task_instance').select(['task_id', 'start_date', 'end_date', 'return_value']).execute();
    const byTask = Object.fromEntries(rows.map((row) => [row.task_id, row]));
    expect(JSON.parse(byTask.wait!.return_value!)).toEqual({ resumedWith: { slept: 300 } });
    expect(new Date(byTask.load!.start_date!).getTime()).toBeGreaterThanOrEqual(new Date(byTask.wait!.end_date!).getTime());
    expect(new Date(byTask.wait!.start_date!).getTime()).toBeGreaterThanOrEqual(new Date(byTask.extract!.end_date!).getTime());
  });

  it('a failed task fails its all_success downstream as upstream_failed, lets all_done run, and fails the run', async () => {
    const dag: SchedulerDag = {
      dagId: 'fragile',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [task('extract'), task('load', ['extract']), task('report', ['load']), task('cleanup', ['extract'], { triggerRule: 'all_done' })],
    };
    const rt = await runtime(dag, { extract: new Fails(), load: new Returns(1), report: new Returns(2), cleanup: new Returns('cleaned') });
    await rt.run('manual__1');
    await rt.start();
    await waitFor(async () => (await rt.runState('manual__1')) === 'failed', { what: 'the run to fail' });
    expect(await rt.states('manual__1')).toEqual({ extract: 'failed', load: 'upstream_failed', report: 'upstream_failed', cleanup: 'success' });
  });

  it('a task that starts from a trigger is deferred by the scheduler, never runs execute(), and resumes at its method', async () => {
    const dag: SchedulerDag = {
      dagId: 'sensor',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [
        task('await_file', [], {
          startTrigger: { classpath: 'test.DelayTrigger', kwargs: { ms: 200 }, method: 'fired', nextKwargs: { why: 'start' }, timeoutMs: null },
        }),
      ],
    };
    const rt = await runtime(dag, { await_file: new StartsFromTrigger() });
    await rt.run('manual__1');
    await rt.scheduler.start();
    open.stops.push(() => rt.scheduler.stop());
    await waitFor(async () => (await rt.states('manual__1')).await_file === 'deferred', { what: 'the deferral by the scheduler' });
    const deferred = await rt.db.db.selectFrom('task_instance').selectAll().where('task_id', '=', 'await_file').executeTakeFirstOrThrow();
    expect(deferred).toMatchObject({ hostname: null, worker_job_id: null, try_number: 0, next_method: 'fired' });
    await rt.worker.start();
    open.stops.push(() => rt.worker.stop());
    open.triggerers.push(await startTriggerer(rt.db));
    await waitFor(async () => (await rt.runState('manual__1')) === 'success', { what: 'the run to succeed' });
    const done = await rt.db.db.selectFrom('task_instance').select('return_value').where('task_id', '=', 'await_file').executeTakeFirstOrThrow();
    expect(JSON.parse(done.return_value!)).toEqual({ event: { slept: 200 }, kwargs: { why: 'start' } });
  });

  it("a start trigger's relative moment counts from when its task starts; one that cannot be built fails only its task", async () => {
    const dag: SchedulerDag = {
      dagId: 'later',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [
        task('first'),
        task('wait_a_minute', ['first'], {
          startTrigger: {
            classpath: 'deferflow.triggers.DateTimeTrigger',
            kwargs: { moment: { $nowPlus: 'PT1M' } },
            method: 'fired',
            nextKwargs: {},
            timeoutMs: null,
          },
        }),
        task('broken', [], {
          startTrigger: {
            classpath: 'deferflow.triggers.DateTimeTrigger',
            kwargs: { moment: { $nowPlus: 'one minute' } },
            method: 'fired',
            nextKwargs: {},
            timeoutMs: null,
          },
        }),
      ],
    };
    const rt = await runtime(dag, { first: new Returns(1) });
    await rt.run('manual__1');
    await rt.scheduler.pass(Date.parse('2030-01-01T00:00:00Z'));
    expect(await rt.states('manual__1')).toEqual({ first: 'scheduled', wait_a_minute: null, broken: 'failed' });
    expect(rt.logs.matching((line) => line.task_id === 'broken')[0]?.error).toContain('holds "one minute", not an ISO-8601 duration');
    await rt.db.db.updateTable('task_instance').set({ state: 'success' }).where('task_id', '=', 'first').execute();

    await rt.scheduler.pass(Date.parse('2030-01-01T05:00:00Z'));
    expect((await rt.states('manual__1')).wait_a_minute).toBe('deferred');
    const trigger = await rt.db.db.selectFrom('trigger').select(['classpath', 'kwargs']).executeTakeFirstOrThrow();
    expect(parsePlain(trigger.kwargs)).toEqual({ moment: '2030-01-01T05:01:00.000Z' });
  });

  it('task instances of a worker whose heartbeat went stale are retried (or requeued) and finish elsewhere', async () => {
    const dag: SchedulerDag = {
      dagId: 'zombies',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [task('was_running', [], { retry: { ...NO_RETRIES, retries: 1, retryDelayMs: 300 } }), task('was_queued'), task('no_tries_left')],
    };
    const rt = await runtime(dag, { was_running: new Returns('again'), was_queued: new Returns('late') }, { zombieThresholdMs: 1000 });
    await rt.run('manual__1');
    const dead = await rt.scheduler.storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'gone', pid: 1, capacity: 1 }, Date.now() - 60_000);
    const set = (taskId: string, state: 'running' | 'queued', tryNumber: number) =>
      rt.db.db.updateTable('task_instance').set({ state, worker_job_id: dead, try_number: tryNumber }).where('task_id', '=', taskId).execute();
    await set('was_running', 'running', 1);
    await set('was_queued', 'queued', 0);
    await set('no_tries_left', 'running', 1);
    await rt.start();
    // One read per check: two could see queued, then running, and pass before the run ends.
    await waitFor(async () => ['success', 'failed'].includes(await rt.runState('manual__1')), { what: 'the run to finish' });
    expect(await rt.states('manual__1')).toEqual({ was_running: 'success', was_queued: 'success', no_tries_left: 'failed' });
    const tries = Object.fromEntries(
      (await rt.db.db.selectFrom('task_instance').select(['task_id', 'try_number']).execute()).map((r) => [r.task_id, r.try_number]),
    );
    expect(tries).toEqual({ was_running: 2, was_queued: 1, no_tries_left: 1 });
    expect(await rt.runState('manual__1')).toBe('failed');
  });

  it("a dead worker's try that was resuming is retried as a new try, afresh from execute(), and its tries run out", async () => {
    class ResumesOrStarts extends BaseOperator {
      execute() {
        return 'started afresh';
      }
      resume() {
        return 'resumed with the old event';
      }
    }
    const dag: SchedulerDag = {
      dagId: 'resumed_zombies',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [
        task('retried', [], { retry: { ...NO_RETRIES, retries: 1, retryDelayMs: 0 } }),
        task('out_of_tries', [], { retry: { ...NO_RETRIES, retries: 1, retryDelayMs: 0 } }),
      ],
    };
    const operator = new ResumesOrStarts();
    const rt = await runtime(dag, { retried: operator, out_of_tries: operator }, { zombieThresholdMs: 1000 });
    await rt.run('manual__1');
    const dead = await rt.scheduler.storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'gone', pid: 1, capacity: 1 }, Date.now() - 60_000);
    // Both were running their resume method (after a deferral) when their worker died.
    const resuming = (taskId: string, tryNumber: number) =>
      rt.db.db
        .updateTable('task_instance')
        .set({ state: 'running', worker_job_id: dead, try_number: tryNumber, max_tries: 1, next_method: 'resume', next_kwargs: '{}', next_event: '"old"' })
        .where('task_id', '=', taskId)
        .execute();
    await resuming('retried', 1);
    await resuming('out_of_tries', 2);
    await rt.start();
    await waitFor(async () => ['success', 'failed'].includes(await rt.runState('manual__1')), { what: 'the run to finish' });
    const rows = await rt.db.db
      .selectFrom('task_instance')
      .select(['task_id', 'state', 'try_number', 'return_value', 'next_method'])
      .orderBy('task_id')
      .execute();
    expect(rows).toEqual([
      { task_id: 'out_of_tries', state: 'failed', try_number: 2, return_value: null, next_method: null },
      { task_id: 'retried', state: 'success', try_number: 2, return_value: '"started afresh"', next_method: null },
    ]);
  });

  it("a dead worker's running try is retried after the task's retry delay (backoff included), not at once", async () => {
    const dag: SchedulerDag = {
      dagId: 'patient',
      hash: 'h1',
      schedule: null,
      signalSchedule: null,
      watchSchedule: null,
      tasks: [task('slow', [], { retry: { retries: 3, retryDelayMs: 1000, exponentialBackoff: true, maxRetryDelayMs: null } })],
    };
    const rt = await runtime(dag, {}, { zombieThresholdMs: 1000 });
    await rt.run('manual__1');
    const now = Date.now();
    const dead = await rt.scheduler.storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'gone', pid: 1, capacity: 1 }, now - 60_000);
    await rt.db.db.updateTable('task_instance').set({ state: 'running', worker_job_id: dead, try_number: 2 }).where('task_id', '=', 'slow').execute();
    await rt.scheduler.pass(now);
    const ti = await rt.db.db.selectFrom('task_instance').select(['state', 'ready_at', 'worker_job_id']).executeTakeFirstOrThrow();
    expect(ti).toMatchObject({ state: 'up_for_retry', worker_job_id: null });
    // Try 2 failed: the wait doubles once (1 s x 2).
    expect(new Date(ti.ready_at!).getTime()).toBe(now + 2000);
    await rt.scheduler.pass(now + 1999);
    expect((await rt.states('manual__1')).slow).toBe('up_for_retry');
    await rt.scheduler.pass(now + 2000);
    expect((await rt.states('manual__1')).slow).toBe('scheduled');
  });

  // On PostgreSQL, where pushes make the poll a 20 s safety net (a SQLite file's are not counted on).
  it.runIf(dialect === 'postgres')(
    'a worker whose heartbeat stops is reaped once it passes the zombie threshold, not at the next safety-net poll',
    async () => {
      const dag: SchedulerDag = {
        dagId: 'frozen',
        hash: 'h1',
        schedule: null,
        signalSchedule: null,
        watchSchedule: null,
        tasks: [task('held', [], { retry: { ...NO_RETRIES, retries: 1, retryDelayMs: 0 } })],
      };
      const db = await migratedDatabase(dialect);
      open.databases.push(db);
      const scheduler = new Scheduler(
        db,
        { pollIntervalMs: 1000, heartbeatIntervalMs: 500, zombieThresholdMs: 3000, runsPerPass: 100, hostname: 'test' },
        async (id) => (id === dag.dagId ? dag : null),
        pino({ level: 'silent' }),
      );
      await scheduler.storage.dagRuns.createDagRun(dag, { runId: 'manual__1', runType: 'manual', logicalDate: Date.now(), conf: {} });
      // A worker that heartbeats once, then never again (frozen): no liveness lock tells.
      const frozenAt = Date.now();
      const worker = await scheduler.storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'frozen', pid: 1, capacity: 1 }, frozenAt);
      await db.db.updateTable('task_instance').set({ state: 'running', worker_job_id: worker, try_number: 1 }).execute();
      await scheduler.start();
      open.stops.push(() => scheduler.stop());
      await waitFor(async () => (await db.db.selectFrom('task_instance').select('state').executeTakeFirstOrThrow()).state !== 'running', {
        timeoutMs: 15_000,
        intervalMs: 50,
        what: "the frozen worker's try reaped",
      });
      const reapedAfterMs = Date.now() - frozenAt;
      expect(reapedAfterMs).toBeGreaterThanOrEqual(3000);
      expect(reapedAfterMs).toBeLessThan(8000);
    },
  );

  it('the same run id or logical date is never created twice', async () => {
    const dag: SchedulerDag = { dagId: 'once', hash: 'h1', schedule: null, signalSchedule: null, watchSchedule: null, tasks: [task('only')] };
    const rt = await runtime(dag, {});
    const at = Date.now();
    expect(await rt.scheduler.storage.dagRuns.createDagRun(dag, { runId: 'scheduled__a', runType: 'scheduled', logicalDate: at, conf: {} })).toEqual(
      expect.any(Number),
    );
    expect(await rt.scheduler.storage.dagRuns.createDagRun(dag, { runId: 'scheduled__a', runType: 'scheduled', logicalDate: at + 1, conf: {} })).toBeNull();
    expect(await rt.scheduler.storage.dagRuns.createDagRun(dag, { runId: 'scheduled__b', runType: 'scheduled', logicalDate: at, conf: {} })).toBeNull();
    expect(await rt.db.db.selectFrom('task_instance').select('id').execute()).toHaveLength(1);
  });
});
