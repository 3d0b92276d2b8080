// Signal actions (AIP-35's start, restart and stop) end to end, as users run them: two
// `deferflow scheduler` processes, a worker and a triggerer on one database, signals sent from
// outside. Each version is acted on once (try numbers count the restarts), a running try is
// aborted through context.signal and a deferred one's trigger dropped.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Dag, FunctionOperator, sendSignal } from '../../../src/index.ts';
import { processDagFolder } from '../../../src/services/dags/dag-processor.ts';
import { serializeDag } from '../../../src/authoring/dags/serialized-dag.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { freeze, PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAG = `import { BaseOperator, Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
class WaitForSignal extends BaseOperator {
  constructor({ key, ...options }) { super(options); this.key = key; }
  execute(context) { return this.waitForSignal(context, this.key, { method: 'resume' }); }
  resume(context, signal) { return signal.version; }
}
// Runs until its signal is aborted, as a streaming job does.
const runForever = async (context) => {
  context.log.info('running until stopped');
  await new Promise((resolve) => context.signal.addEventListener('abort', resolve));
  context.log.info('aborted: ' + context.signal.reason.code);
  return 'an outcome that must be dropped';
};
const upstream = new WaitForSignal({ taskId: 'upstream', key: 'go.upstream' });
const sufficient = new FunctionOperator({ taskId: 'sufficient', fn: () => 'started', signals: [{ key: 'start.now', action: 'start' }] });
const necessary = new FunctionOperator({ taskId: 'necessary', fn: () => 'started', signals: [{ key: 'start.gate', action: 'start', condition: 'necessary' }] });
const runner = new FunctionOperator({
  taskId: 'runner',
  fn: runForever,
  signals: [{ key: 'runner.restart', action: 'restart' }, { key: 'all.stop', action: 'stop' }],
});
const batch = new FunctionOperator({
  taskId: 'batch',
  fn: async (context) => ({ try: context.taskInstance.tryNumber, signal: await context.actedSignal('batch.ready') }),
  signals: [{ key: 'batch.ready', action: 'restart' }],
});
const waiter = new WaitForSignal({ taskId: 'waiter', key: 'never.sent', signals: [{ key: 'all.stop', action: 'stop', endState: 'success' }] });
upstream.before([sufficient, necessary]);
runner.before(batch);
export const dag = new Dag({ dagId: 'actions' }).add(upstream, sufficient, necessary, runner, batch, waiter);
`;

const started = (proc: TriggererProcess) => proc.waitForJob(20_000);

describe.each(testDialects)('signal actions on %s', (dialect) => {
  it('start (sufficient, necessary), restart and stop act once per version with two schedulers, stopping running and deferred tries', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-actions');
    writeFileSync(path.join(dags, 'actions.mjs'), DAG);
    await processDagFolder(db, dags);
    // Sent before the run exists: acts on nothing.
    await sendSignal(db, 'start.now', 'too early');
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '0.5'];
    const procs = [
      spawnDeferflow(['scheduler', '--db', db.url, ...fast]),
      spawnDeferflow(['scheduler', '--db', db.url, ...fast]),
      spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '6', ...fast]),
      spawnTriggerer(['--db', db.url, ...fast]),
    ];
    for (const proc of procs) await started(proc);
    const trigger = spawnDeferflow(['dags', 'trigger', 'actions', '--db', db.url, '--run-id', 'r1']);
    expect((await trigger.exit).code).toBe(0);

    const tis = async () =>
      Object.fromEntries(
        (
          await db.db
            .selectFrom('task_instance')
            .select(['id', 'task_id', 'state', 'try_number', 'return_value', 'trigger_id'])
            .where('dag_id', '=', 'actions')
            .execute()
        ).map((row) => [row.task_id, { ...row, value: row.return_value === null ? null : JSON.parse(row.return_value) }]),
      );
    const until = (what: string, check: (now: Awaited<ReturnType<typeof tis>>) => boolean) =>
      waitFor(async () => check(await tis()), { what, timeoutMs: 30_000 });

    await until(
      'upstream and waiter deferred, runner running',
      (now) => now.upstream!.state === 'deferred' && now.waiter!.state === 'deferred' && now.runner!.state === 'running',
    );
    let now = await tis();
    // Their upstream is deferred: neither start signal has come, so both wait with no state.
    expect([now.sufficient!.state, now.necessary!.state, now.batch!.state]).toEqual([null, null, null]);

    // start, sufficient: runs although its upstream is still deferred.
    await sendSignal(db, 'start.now');
    await until('sufficient ran', (now) => now.sufficient!.state === 'success');
    // start, necessary: the signal alone is not enough...
    await sendSignal(db, 'start.gate');
    // restart of a running try: stopped through its signal, then a new try.
    await sendSignal(db, 'runner.restart', 1);
    await until('runner restarted', (now) => now.runner!.state === 'running' && now.runner!.try_number === 2);
    expect((await tis()).necessary!.state).toBe(null);
    // ...its upstream finishing too starts it.
    await sendSignal(db, 'go.upstream');
    await until('necessary ran', (now) => now.upstream!.state === 'success' && now.necessary!.state === 'success');

    // restart of a task with no state (its upstream runs forever): it starts; of a finished one: a new try.
    await sendSignal(db, 'batch.ready', { batch: 1 });
    await until('batch 1 done', (now) => now.batch!.state === 'success');
    expect((await tis()).batch!.value).toMatchObject({ try: 1, signal: { key: 'batch.ready', version: 1, value: { batch: 1 } } });
    await sendSignal(db, 'batch.ready', { batch: 2 });
    await until('batch 2 done', (now) => now.batch!.state === 'success' && now.batch!.try_number === 2);
    expect((await tis()).batch!.value).toMatchObject({ try: 2, signal: { key: 'batch.ready', version: 2, value: { batch: 2 } } });

    // stop: the running try ends skipped (the default), the deferred one as declared, its trigger dropped.
    const waiterTrigger = (await tis()).waiter!.trigger_id!;
    await sendSignal(db, 'all.stop');
    await until('runner and waiter stopped', (now) => now.runner!.state === 'skipped' && now.waiter!.state === 'success');
    now = await tis();
    expect(now.runner!.value).toBe(null); // the aborted try's own outcome was dropped
    expect(now.waiter!.trigger_id).toBe(null);
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('id', '=', waiterTrigger).executeTakeFirst()) === undefined, {
      what: "the waiter's trigger dropped",
    });
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'r1').executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run to succeed',
    });

    // Once each: two schedulers, and every try counted.
    now = await tis();
    expect(Object.fromEntries(Object.entries(now).map(([taskId, ti]) => [taskId, [ti.state, ti.try_number]]))).toEqual({
      upstream: ['success', 1],
      sufficient: ['success', 1],
      necessary: ['success', 1],
      runner: ['skipped', 2],
      batch: ['success', 2],
      waiter: ['success', 1],
    });
    // The first runner try saw its signal aborted with the restart's reason, and says why it ended.
    const logs = spawnDeferflow(['tasks', 'logs', '--db', db.url, '--dag', 'actions', '--task', 'runner', '--run', 'r1', '--try', '1']);
    expect((await logs.exit).code).toBe(0);
    const text = logs.text.join('\n');
    expect(text).toContain('aborted: DF_TASK_STOPPED_BY_SIGNAL');
    expect(text).toContain('stopped by a signal; it runs again as a new try');
    const acted = await db.db.selectFrom('task_instance_signal').select(['signal_key', 'version', 'acted_version']).orderBy('signal_key').execute();
    expect(acted.filter((row) => row.signal_key === 'start.now').map((row) => [Number(row.version), Number(row.acted_version)])).toEqual([[2, 2]]);

    await stopCleanly(procs);
  }, 120_000);

  it('a restart of a task that starts from its trigger starts it from its trigger again, never running its function on a worker', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-restart-trigger');
    writeFileSync(
      path.join(dags, 'ticks.mjs'),
      `import { BaseOperator, Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
// Ended by its trigger: its function is what a worker would run, and must never run.
const tick = new FunctionOperator({
  taskId: 'tick',
  fn: () => { throw new Error('fn ran on a worker'); },
  startTrigger: { trigger: new TimeDeltaTrigger({ delta: 0.1, endFromTrigger: true }), method: 'execute' },
  signals: [{ key: 'tick.again', action: 'restart' }],
});
// Keeps the run going while the test sends its signals.
class Hold extends BaseOperator {
  execute(context) { return this.waitForSignal(context, 'hold.release', { method: 'done' }); }
  done() { return 'released'; }
}
export const dag = new Dag({ dagId: 'ticks' }).add(tick, new Hold({ taskId: 'hold' }));
`,
    );
    await processDagFolder(db, dags);
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '0.5'];
    const procs = [
      spawnDeferflow(['scheduler', '--db', db.url, ...fast]),
      spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '2', ...fast]),
      spawnTriggerer(['--db', db.url, ...fast]),
    ];
    for (const proc of procs) await started(proc);
    expect((await spawnDeferflow(['dags', 'trigger', 'ticks', '--db', db.url, '--run-id', 'r1']).exit).code).toBe(0);
    const tick = () =>
      db.db
        .selectFrom('task_instance')
        .select(['id', 'state', 'try_number', 'hostname', 'end_date'])
        .where('dag_id', '=', 'ticks')
        .where('task_id', '=', 'tick')
        .executeTakeFirstOrThrow();
    await waitFor(async () => (await tick()).state === 'success', { what: 'tick ended by its trigger', timeoutMs: 30_000 });
    const first = await tick();
    expect(first.hostname).toBe(null);

    const waits = () => db.db.selectFrom('trigger_wait').select('trigger_id').where('task_instance_id', '=', first.id).execute();
    expect(await waits()).toHaveLength(1);
    const sent = Date.now();
    await sendSignal(db, 'tick.again');
    // A second wait, on a new start trigger, ended by it again after the signal.
    await waitFor(async () => (await waits()).length === 2 && (await tick()).state === 'success', {
      what: 'tick restarted from its trigger and ended by it again',
      timeoutMs: 30_000,
    });
    expect(Date.parse(String((await tick()).end_date))).toBeGreaterThanOrEqual(sent - 1000);
    // No worker ever ran it: its function would have failed it.
    expect(await tick()).toMatchObject({ state: 'success', hostname: null, try_number: first.try_number });
    const acted = await db.db
      .selectFrom('task_instance_signal')
      .select(['version', 'acted_version'])
      .where('signal_key', '=', 'tick.again')
      .executeTakeFirstOrThrow();
    expect([Number(acted.version), Number(acted.acted_version)]).toEqual([1, 1]);

    await sendSignal(db, 'hold.release');
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'r1').executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run to succeed',
    });
    await stopCleanly(procs);
  }, 90_000);

  it("a dead worker's stop request is carried out by the scheduler: the try ends as the signal asked, not as a failure", async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-actions-dead');
    writeFileSync(path.join(dags, 'actions.mjs'), DAG);
    await processDagFolder(db, dags);
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '0.5'];
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast, '--zombie-threshold', '6']);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '6', ...fast]);
    for (const proc of [scheduler, worker]) await started(proc);
    expect((await spawnDeferflow(['dags', 'trigger', 'actions', '--db', db.url, '--run-id', 'r1']).exit).code).toBe(0);
    const runner = () =>
      db.db.selectFrom('task_instance').select(['state', 'stop_request', 'try_number']).where('task_id', '=', 'runner').executeTakeFirstOrThrow();
    await waitFor(async () => (await runner()).state === 'running', { what: 'runner running', timeoutMs: 30_000 });
    // The worker freezes (a killed one is known dead at once by its liveness lock); the signal
    // comes while its heartbeat still looks fresh (6 s), so the scheduler asks the frozen worker
    // to stop the try, and then, past the threshold, reaps it.
    await freeze(worker, db.url);
    await sendSignal(db, 'all.stop');
    await waitFor(async () => (await runner()).stop_request === 'skipped', { what: 'the stop requested', timeoutMs: 5_000 });
    await waitFor(async () => (await runner()).state === 'skipped', { what: 'the dead worker reaped as the signal asked', timeoutMs: 30_000 });
    expect(await runner()).toEqual({ state: 'skipped', stop_request: null, try_number: 1 });
    worker.kill('SIGKILL');
    await worker.exit;
    await stopCleanly([scheduler]);
  }, 90_000);
});

describe('signal actions on a task', () => {
  const dagWith = (signals: unknown) => new Dag({ dagId: 'd' }).add(new FunctionOperator({ taskId: 't', fn: () => null, signals: signals as never }));

  it('are refused at DAG load when they cannot work, naming the task and field', () => {
    expect(() => serializeDag(dagWith([{ key: 'k', action: 'pause' }]), 'f')).toThrow(
      'DAG d, task t: signals[0]: action must be one of start, restart, stop, got "pause"',
    );
    expect(() => serializeDag(dagWith([{ key: 'bad key', action: 'start' }]), 'f')).toThrow('DAG d, task t: signals[0]: signal key "bad key" is not a key');
    expect(() =>
      serializeDag(
        dagWith([
          { key: 'k', action: 'start' },
          { key: 'k', action: 'stop' },
        ]),
        'f',
      ),
    ).toThrow('DAG d, task t: signals[1]: key k has an action already; one action per key');
    expect(() => serializeDag(dagWith([{ key: 'k', action: 'restart', endState: 'failed' }]), 'f')).toThrow('endState is for stop actions only');
    expect(() => serializeDag(dagWith([{ key: 'k', action: 'stop', endState: 'upstream_failed' }]), 'f')).toThrow(
      'endState must be one of skipped, failed, success, got "upstream_failed"',
    );
    expect(() => serializeDag(dagWith({ key: 'k' }), 'f')).toThrow('signals must be a list of { key, action }');
  });

  it('are stored in the serialized DAG with their defaults, and absent when none (a DAG without them keeps its hash)', () => {
    const tasks = (signals: unknown) => (serializeDag(dagWith(signals), 'f').data.dag as { tasks: Record<string, unknown>[] }).tasks[0]!;
    expect(
      tasks([
        { key: 'a', action: 'start' },
        { key: 'b', action: 'stop' },
        { key: 'c', action: 'restart' },
      ]).signals,
    ).toEqual([
      { key: 'a', action: 'start', condition: 'sufficient' },
      { key: 'b', action: 'stop', end_state: 'skipped' },
      { key: 'c', action: 'restart' },
    ]);
    expect('signals' in tasks(undefined)).toBe(false);
  });
});
