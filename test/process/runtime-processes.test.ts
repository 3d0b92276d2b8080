/**
 * The task runtime as users run it: `deferflow worker`, `deferflow scheduler` and the triggerer
 * as separate processes on one database (SQLite file or PostgreSQL), a DAG folder, and the
 * `dags` commands.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processScratch } from '../support/process-scratch.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import {
  freeze,
  PACKAGE_ENTRY,
  PACKAGE_TRIGGERS,
  RUNNER_PROCESSES,
  spawnDeferflow,
  spawnTriggerer,
  type TriggererProcess,
  stopCleanly,
} from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const INDEX = PACKAGE_ENTRY;
const TRIGGERS = PACKAGE_TRIGGERS;

const WAITING_DAG = `
import { BaseOperator, Dag, type TaskContext } from ${JSON.stringify(INDEX)};
import { TimeDeltaTrigger } from ${JSON.stringify(TRIGGERS)};
class Extract extends BaseOperator { execute() { return { rows: 42 }; } }
class WaitASecond extends BaseOperator {
  execute(): never { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 1 }), method: 'resume', kwargs: { asked: 'politely' } }); }
  resume(_context: TaskContext, event: unknown, kwargs: { asked: string }) { return { fired: typeof event === 'string', asked: kwargs.asked }; }
}
class Load extends BaseOperator { execute() { return 'loaded'; } }
export const dag = new Dag({ dagId: 'waiting_etl' });
const extract = new Extract({ taskId: 'extract' });
const wait = new WaitASecond({ taskId: 'wait' });
const load = new Load({ taskId: 'load' });
dag.add(extract, wait, load);
extract.before(wait).before(load);
`;

/** A task whose first try runs a minute (long enough to be taken from its worker) and whose second returns; each try appends "try<N> <worker pid>" to runs.log. */
const SLOW_FIRST_TRY_DAG = `
import { appendFileSync } from 'node:fs';
import { BaseOperator, Dag, type TaskContext } from ${JSON.stringify(INDEX)};
class SlowFirstTry extends BaseOperator {
  async execute(context: TaskContext) {
    appendFileSync(import.meta.dirname + '/runs.log', \`try\${context.taskInstance.tryNumber} \${process.ppid}\n\`);
    if (context.taskInstance.tryNumber === 1) await new Promise((resolve) => setTimeout(resolve, 60_000));
    return 'second try';
  }
}
export const dag = new Dag({ dagId: 'survivor', defaultArgs: { retries: 1, retryDelay: 0.1 } });
dag.add(new SlowFirstTry({ taskId: 'slow' }));
`;

describe.each(testDialects)('task runtime processes on %s', (dialect) => {
  it('a DAG with a deferring task runs worker → triggerer → worker → success; a broken DAG file is reported; all exit 0 on SIGTERM', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('runtime');
    writeFileSync(path.join(dags, 'waiting_etl.mts'), WAITING_DAG);
    writeFileSync(path.join(dags, 'broken.mts'), `import ${JSON.stringify(INDEX)};\nthrow new Error('syntax of the config is off');\n`);

    const reserialize = spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]);
    expect(await reserialize.exitWithin()).toEqual({ code: 1, signal: null });
    expect(reserialize.text).toContain('waiting_etl  created');
    expect(reserialize.text).toContain(`IMPORT ERROR IN${' '.repeat(path.join(dags, 'broken.mts').length - 'IMPORT ERROR IN'.length + 2)}ERROR`);
    expect(reserialize.text.find((line) => line.startsWith(path.join(dags, 'broken.mts')))).toContain('syntax of the config is off');

    const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '2', ...fast], RUNNER_PROCESSES);
    const triggerer = spawnTriggerer(['--db', db.url, ...fast]);
    for (const proc of [scheduler, worker, triggerer]) await proc.waitForJob(20_000);

    const trigger = spawnDeferflow(['dags', 'trigger', 'waiting_etl', '--db', db.url, '--run-id', 'manual__e2e']);
    expect(await trigger.exitWithin()).toEqual({ code: 0, signal: null });
    expect(trigger.text).toEqual(['manual__e2e']);

    const runState = async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'manual__e2e').executeTakeFirstOrThrow()).state;
    await waitFor(async () => (await runState()) === 'success', { what: 'the run to succeed', timeoutMs: 20_000 });
    const rows = Object.fromEntries(
      (await db.db.selectFrom('task_instance').select(['task_id', 'state', 'return_value', 'try_number']).execute()).map((row) => [row.task_id, row]),
    );
    expect(Object.fromEntries(Object.entries(rows).map(([id, row]) => [id, row.state]))).toEqual({ extract: 'success', wait: 'success', load: 'success' });
    expect(JSON.parse(rows.wait!.return_value!)).toEqual({ fired: true, asked: 'politely' });
    expect(rows.wait!.try_number).toBe(1);
    expect(worker.matching((line) => typeof line.msg === 'string' && line.msg.includes('deferred; resumes at resume'))).toHaveLength(1);

    await stopCleanly([worker, scheduler, triggerer]);
    const jobs = await db.db.selectFrom('job').select(['job_type', 'state']).orderBy('job_type').execute();
    expect(jobs).toEqual([
      { job_type: 'SchedulerJob', state: 'success' },
      { job_type: 'TriggererJob', state: 'success' },
      { job_type: 'WorkerJob', state: 'success' },
    ]);
  }, 60_000);

  /** A migrated database, a DAG folder holding `dagText` as dag.mts, and the folder's serialized DAGs. */
  async function withDag(dagText: string) {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('runtime');
    writeFileSync(path.join(dags, 'dag.mts'), dagText);
    expect(await spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]).exitWithin()).toEqual({ code: 0, signal: null });
    return { db, dags, log: path.join(dags, 'runs.log') };
  }
  const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];
  const lines = (file: string) =>
    readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(' '));
  const started = (proc: TriggererProcess) => proc.waitForJob(20_000);

  it('two schedulers and two workers: one set of task instances, each run exactly once', async () => {
    const { db, dags, log } = await withDag(`
import { appendFileSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(INDEX)};
class Work extends BaseOperator {
  async execute() {
    // Task code runs in a runner process its worker forked: the parent is the worker.
    appendFileSync(import.meta.dirname + '/runs.log', \`\${this.taskId} \${process.ppid}\n\`);
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
}
export const dag = new Dag({ dagId: 'fan_out' });
for (let i = 0; i < 30; i++) dag.add(new Work({ taskId: \`work_\${i}\` }));
`);
    const schedulers = [0, 1].map(() => spawnDeferflow(['scheduler', '--db', db.url, ...fast]));
    const workers = [0, 1].map(() => spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '3', ...fast], RUNNER_PROCESSES));
    for (const proc of [...schedulers, ...workers]) await started(proc);
    expect(await spawnDeferflow(['dags', 'trigger', 'fan_out', '--db', db.url, '--run-id', 'r1']).exitWithin()).toEqual({ code: 0, signal: null });
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'r1').executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run',
      timeoutMs: 30_000,
    });

    const runs = lines(log);
    const byTask = new Map<string, string[]>();
    for (const [task, pid] of runs) byTask.set(task!, [...(byTask.get(task!) ?? []), pid!]);
    expect(byTask.size).toBe(30);
    expect(
      [...byTask].filter(([, pids]) => pids.length !== 1),
      'tasks run more than once',
    ).toEqual([]);
    const pids = new Set(runs.map(([, pid]) => Number(pid)));
    expect(pids).toEqual(new Set(workers.map((w) => w.pid)));
    const hosts = await db.db.selectFrom('task_instance').select(['pid', 'try_number']).execute();
    expect(hosts).toHaveLength(30);
    expect(hosts.every((row) => row.try_number === 1 && pids.has(row.pid!))).toBe(true);
    expect(await db.db.selectFrom('dag_run').select('run_id').execute()).toEqual([{ run_id: 'r1' }]);
    // The run's state changes are conditional writes: exactly one scheduler logged each.
    const logged = (msg: string) => schedulers.flatMap((scheduler) => scheduler.matching((line) => line.msg === msg));
    // The database says success before the scheduler's log line has come through its pipe.
    await waitFor(() => logged('DAG run fan_out r1 success').length > 0, { what: 'the success line read from the scheduler' });
    expect(logged('DAG run fan_out r1 running')).toHaveLength(1);
    expect(logged('DAG run fan_out r1 success')).toHaveLength(1);
  }, 60_000);

  it('the scheduler process schedules a run from the serialized DAG alone: the DAG file is gone', async () => {
    const { db, dags } = await withDag(WAITING_DAG);
    rmSync(path.join(dags, 'dag.mts'));
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    await started(scheduler);
    expect(await spawnDeferflow(['dags', 'trigger', 'waiting_etl', '--db', db.url, '--run-id', 'r1']).exitWithin()).toEqual({ code: 0, signal: null });
    const states = async () =>
      Object.fromEntries((await db.db.selectFrom('task_instance').select(['task_id', 'state']).execute()).map((row) => [row.task_id, row.state]));
    await waitFor(async () => (await states()).extract === 'scheduled', { what: 'extract scheduled', timeoutMs: 20_000 });
    expect(await states()).toEqual({ extract: 'scheduled', wait: null, load: null });
    expect((await db.db.selectFrom('dag_run').select('state').executeTakeFirstOrThrow()).state).toBe('running');
    await stopCleanly([scheduler]);
  }, 60_000);

  /**
   * After the victim was killed or frozen at `since`: the run succeeds within 15 s, its first try
   * having run on the victim and its second on the survivor, retried once by the scheduler.
   */
  async function expectRetriedOnSurvivor({ db, log, scheduler, victim, survivor }: Awaited<ReturnType<typeof slowFirstTryOnVictim>>, since: number) {
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'r1').executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run',
      timeoutMs: 20_000,
    });
    expect(Date.now() - since).toBeLessThan(15_000);
    expect(lines(log)).toEqual([
      ['try1', String(victim.pid)],
      ['try2', String(survivor.pid)],
    ]);
    expect(scheduler.matching((line) => line.retried === 1)).toHaveLength(1);
  }

  /**
   * SLOW_FIRST_TRY_DAG's first try running on a victim worker, a survivor worker started, and a
   * scheduler started before both with `zombieThreshold` (seconds) and a 30 s poll, so that only a
   * push starts the pass that retries the try.
   */
  async function slowFirstTryOnVictim(zombieThreshold: string) {
    const { db, dags, log } = await withDag(SLOW_FIRST_TRY_DAG);
    const scheduler = spawnDeferflow([
      'scheduler',
      '--db',
      db.url,
      '--zombie-threshold',
      zombieThreshold,
      '--poll-interval',
      '30',
      '--heartbeat-interval',
      '0.5',
    ]);
    await started(scheduler);
    const victim = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '1', ...fast], RUNNER_PROCESSES);
    await started(victim);
    expect(await spawnDeferflow(['dags', 'trigger', 'survivor', '--db', db.url, '--run-id', 'r1']).exitWithin()).toEqual({ code: 0, signal: null });
    await waitFor(
      () => {
        try {
          return lines(log).length === 1;
        } catch {
          return false;
        }
      },
      { what: 'the first try running' },
    );
    const survivor = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '1', ...fast], RUNNER_PROCESSES);
    await started(survivor);
    return { db, log, scheduler, victim, survivor };
  }

  it('a worker killed with SIGKILL is known dead by its liveness lock: its running task is retried on another worker within seconds, far below the 60 s zombie threshold', async () => {
    // A zombie threshold and a poll far longer than the test: only the freed lock can tell of the
    // death, and only a push (the ring's, on PostgreSQL; a commit, on SQLite) can start the pass
    // that retries the try. The scheduler starts before both workers, so on PostgreSQL its ring
    // must close over each as it starts.
    const { db, log, scheduler, victim, survivor } = await slowFirstTryOnVictim('60');
    const killedAt = Date.now();
    victim.kill('SIGKILL');
    expect(await victim.exitWithin()).toEqual({ code: null, signal: 'SIGKILL' });

    // The target is 2 s to the retry; the bound includes the second try's own start and run, on a loaded machine.
    await expectRetriedOnSurvivor({ db, log, scheduler, victim, survivor }, killedAt);
    const ti = await db.db.selectFrom('task_instance').select(['state', 'try_number', 'pid', 'return_value']).executeTakeFirstOrThrow();
    expect(ti).toMatchObject({ state: 'success', try_number: 2, pid: survivor.pid });
    expect(JSON.parse(ti.return_value!)).toBe('second try');
  }, 60_000);

  it('a frozen worker (SIGSTOP) is found at the zombie threshold though the scheduler last passed before it held any try: its claim told the scheduler', async () => {
    // A 30 s poll: only a push can bring the scheduler pass that learns the worker holds a try
    // (and so when its heartbeat would be stale) within the test's bound.
    const { db, log, scheduler, victim, survivor } = await slowFirstTryOnVictim('3');
    const frozenAt = Date.now();
    await freeze(victim, db.url);
    try {
      // The threshold (3 s) less the last heartbeat's age, then the second try's start and run.
      await expectRetriedOnSurvivor({ db, log, scheduler, victim, survivor }, frozenAt);
    } finally {
      victim.kill('SIGKILL');
    }
  }, 60_000);
});
