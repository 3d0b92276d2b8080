// Task code runs in runner processes the worker forks (--task-isolation process, the default):
// whatever a task does to its own process (spins the CPU, exits, throws outside its promise
// chain, runs out of memory), the worker keeps heartbeating and running its other tasks, and
// only that task's try fails, with a code saying what happened. Real processes throughout.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { WORKER_RECHECK_MS } from '../../src/authoring/dags/loader.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { waitFor, type TestDatabase } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, RUNNER_PROCESSES, spawnDeferflow, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const FAST = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];

async function withDag(db: TestDatabase, name: string, body: string): Promise<string> {
  const dags = scratch.dir(name);
  writeFileSync(
    path.join(dags, `${name}.mjs`),
    `import { appendFileSync, writeFileSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
const here = ${JSON.stringify(dags)};
${body}`,
  );
  await processDagFolder(db, dags);
  return dags;
}

/**
 * A scheduler, and a worker running task code in runner processes with `workerFlags`, both up;
 * stop() ends them with SIGTERM and checks that both exit 0. Returns the worker's job id too.
 */
async function schedulerAndWorker(db: TestDatabase, dags: string, workerFlags: readonly string[] = []) {
  const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...FAST]);
  const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...workerFlags, ...FAST], RUNNER_PROCESSES);
  await scheduler.waitForJob(20_000);
  const workerJobId = await worker.waitForJob(20_000);
  return {
    worker,
    workerJobId,
    stop: async () => {
      await stopCleanly([worker, scheduler]);
    },
  };
}

const states = async (db: TestDatabase) =>
  Object.fromEntries(
    (await db.db.selectFrom('task_instance').select(['task_id', 'state']).execute()).map((row) => [row.task_id, row.state] as const),
  ) as Record<string, string | null>;

/** The error line the worker wrote to the try's task log when it failed it. */
const failureLine = async (db: TestDatabase, taskId: string) => {
  const rows = await db.db
    .selectFrom('task_log')
    .innerJoin('task_instance', 'task_instance.id', 'task_log.task_instance_id')
    .select(['task_log.message', 'task_log.fields'])
    .where('task_instance.task_id', '=', taskId)
    .where('task_log.level', '=', 'error')
    .execute();
  const row = rows.at(-1);
  return row ? { message: row.message, code: (JSON.parse(row.fields ?? '{}') as { code?: string }).code } : null;
};

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

// What isolation guards is the worker's process, not the database: one dialect (the try's failure
// is written by the same storage operations the worker's unit tests run on each).
describe.each(oneDialect)('task code isolated from the worker, on %s', (dialect) => {
  it('a task spinning the CPU fails at its 5 s execution timeout and its runner is killed, while another task on the worker finishes and its heartbeat stays fresh', async () => {
    const db = await scratch.database(dialect);
    const dags = await withDag(
      db,
      'spin',
      `class Spin extends BaseOperator {
  execute() {
    writeFileSync(here + '/spin.pid', String(process.pid));
    const until = Date.now() + 60_000;
    while (Date.now() < until) {}
    return 'never';
  }
}
class Steady extends BaseOperator {
  async execute() {
    for (let i = 0; i < 30; i++) await new Promise((resolve) => setTimeout(resolve, 100));
    return 'steady';
  }
}
export const dag = new Dag({ dagId: 'spin' })
  // 5 s: the timeout counts from the try's start, and on a loaded machine a runner may take
  // seconds to load the DAG file before execute() writes its pid.
  .add(new Spin({ taskId: 'spin', executionTimeout: 5, retries: 0 }))
  .add(new Steady({ taskId: 'steady' }));
`,
    );
    const { worker, workerJobId: jobId, stop } = await schedulerAndWorker(db, dags);
    await triggerDagRun(db, 'spin');
    await waitFor(async () => (await states(db)).spin === 'running', { what: 'the spinning task running', timeoutMs: 20_000 });

    // The heartbeat, sampled while the task spins: never staler than a few intervals.
    let stalest = 0;
    const sample = async () => {
      const job = await db.db.selectFrom('job').select('latest_heartbeat').where('id', '=', jobId).executeTakeFirstOrThrow();
      stalest = Math.max(stalest, Date.now() - new Date(job.latest_heartbeat).getTime());
    };
    await waitFor(
      async () => {
        await sample();
        const now = await states(db);
        return now.spin === 'failed' && now.steady === 'success';
      },
      { what: 'the spinning task failed and the steady one done', timeoutMs: 30_000, intervalMs: 100 },
    );
    // Fresh throughout (heartbeats every 0.5 s; a busy machine may delay one or two): on the
    // worker's own loop the spin would have frozen it for the whole task.
    expect(stalest).toBeLessThan(5_000);

    const spin = await db.db.selectFrom('task_instance').select(['start_date', 'end_date']).where('task_id', '=', 'spin').executeTakeFirstOrThrow();
    const ranMs = new Date(spin.end_date!).getTime() - new Date(spin.start_date!).getTime();
    expect(ranMs).toBeGreaterThanOrEqual(5_000);
    expect(ranMs).toBeLessThan(10_000);
    expect(await failureLine(db, 'spin')).toMatchObject({ code: 'DF_TASK_EXECUTION_TIMEOUT' });
    // Stopped for real: the runner that spun is gone.
    const spinPid = Number(readFileSync(path.join(dags, 'spin.pid'), 'utf8'));
    await waitFor(() => !alive(spinPid), { what: 'the spinning runner killed', timeoutMs: 5_000 });
    expect(worker.exited).toBeNull();
    await stop();
  }, 90_000);

  it('a task that exits, throws outside its promise chain or runs out of memory fails only its own try, saying what happened; the worker carries on', async () => {
    const db = await scratch.database(dialect);
    const dags = await withDag(
      db,
      'crashes',
      `class Exits extends BaseOperator {
  async execute() { process.exit(1); }
}
class Uncaught extends BaseOperator {
  async execute() {
    setTimeout(() => { throw new RangeError('thrown from a timer'); }, 10);
    await new Promise(() => {});
  }
}
class Hog extends BaseOperator {
  async execute() {
    const kept = [];
    for (;;) kept.push(new Array(1_000_000).fill(kept.length));
  }
}
class Fine extends BaseOperator {
  async execute() { await new Promise((resolve) => setTimeout(resolve, 500)); return 'fine'; }
}
export const dag = new Dag({ dagId: 'crashes' })
  .add(new Exits({ taskId: 'exits', retries: 0 }))
  .add(new Uncaught({ taskId: 'uncaught', retries: 0 }))
  .add(new Hog({ taskId: 'hog', retries: 0 }))
  .add(new Fine({ taskId: 'fine' }));
export const after = new Dag({ dagId: 'after' }).add(new Fine({ taskId: 'after' }));
`,
    );
    const { worker, stop } = await schedulerAndWorker(db, dags, ['--runner-max-memory', '96']);
    await triggerDagRun(db, 'crashes');
    await waitFor(
      async () => {
        const now = await states(db);
        return ['exits', 'uncaught', 'hog', 'fine'].every((task) => now[task] === 'failed' || now[task] === 'success');
      },
      { what: 'every task ended', timeoutMs: 60_000 },
    );
    expect(await states(db)).toEqual({ exits: 'failed', uncaught: 'failed', hog: 'failed', fine: 'success' });
    const exits = await failureLine(db, 'exits');
    expect(exits).toMatchObject({ code: 'DF_TASK_CRASHED' });
    expect(exits!.message).toContain('exited with code 1');
    const uncaught = await failureLine(db, 'uncaught');
    expect(uncaught).toMatchObject({ code: 'DF_TASK_CRASHED' });
    expect(uncaught!.message).toContain('RangeError: thrown from a timer');
    const hog = await failureLine(db, 'hog');
    expect(hog).toMatchObject({ code: 'DF_TASK_CRASHED' });
    expect(hog!.message).toContain('ran out of memory');
    expect(hog!.message).toContain('96 MB');

    // The worker lives on, and its replaced runners run the next DAG's task.
    expect(worker.exited).toBeNull();
    await triggerDagRun(db, 'after');
    await waitFor(async () => (await states(db)).after === 'success', { what: 'a task after the crashes', timeoutMs: 20_000 });
    await stop();
  }, 120_000);
});

/** An operator that logs the pid of the process running it to pids.log in its DAG folder. */
const NOTE_OPERATOR = `class Note extends BaseOperator {
  async execute() { appendFileSync(here + '/pids.log', process.pid + '\\n'); return process.pid; }
}
`;

/** The pids Note tasks logged, in order. */
function pidsLogged(dags: string): number[] {
  return readFileSync(path.join(dags, 'pids.log'), 'utf8').trim().split('\n').map(Number);
}

describe('runner processes on sqlite', () => {
  it('a worker stopped while its first runner is still starting exits 0 with nothing on stderr', async () => {
    const db = await scratch.database('sqlite');
    const dags = await withDag(db, 'idle', `export const dag = new Dag({ dagId: 'idle' });\n`);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...FAST], RUNNER_PROCESSES);
    await worker.waitForJob(20_000);
    await waitFor(() => runnersOf(worker.pid!).length === 1, { what: 'a runner started with the worker', timeoutMs: 10_000 });
    await stopCleanly([worker]);
    expect(worker.stderr.join('\n')).toBe('');
  }, 30_000);

  it('the last runner, retired at --runner-max-tasks, is replaced at once, with no task waiting for it', async () => {
    const db = await scratch.database('sqlite');
    const dags = await withDag(
      db,
      'once',
      `${NOTE_OPERATOR}export const dag = new Dag({ dagId: 'once' }).add(new Note({ taskId: 'note' }));
`,
    );
    // One slot: one runner at most, so no spare is alive when it retires.
    const { worker, stop } = await schedulerAndWorker(db, dags, ['--concurrency', '1', '--runner-max-tasks', '1']);
    await triggerDagRun(db, 'once');
    await waitFor(async () => Object.values(await states(db)).includes('success'), { what: 'the task done', timeoutMs: 30_000 });
    const [ranOn] = pidsLogged(dags);
    await waitFor(() => runnersOf(worker.pid!).some((pid) => pid !== ranOn), { what: 'a new runner in place of the retired one', timeoutMs: 10_000 });
    expect(alive(ranOn!)).toBe(false);
    await stop();
  }, 60_000);

  it("starts tasks with their DAG file's settings as they are now: an edit is seen by tasks starting a couple of seconds after it", async () => {
    const db = await scratch.database('sqlite');
    // flaky runs after first, whose loading told the worker the settings of every task of the DAG.
    const source = (retries: number) => `class First extends BaseOperator { execute() { return 'ok'; } }
class Flaky extends BaseOperator { execute() { throw new Error('flaky failed'); } }
const first = new First({ taskId: 'first' });
const flaky = new Flaky({ taskId: 'flaky', retries: ${retries}, retryDelay: 3600 });
first.before(flaky);
export const dag = new Dag({ dagId: 'edited' }).add(first, flaky);
`;
    const dags = await withDag(db, 'edited', source(0));
    const { stop } = await schedulerAndWorker(db, dags);
    const flakyState = async (runId: string) =>
      (await db.db.selectFrom('task_instance').select('state').where('run_id', '=', runId).where('task_id', '=', 'flaky').executeTakeFirst())?.state;
    const before = await triggerDagRun(db, 'edited');
    await waitFor(async () => (await flakyState(before)) === 'failed', { what: 'flaky failed without retries', timeoutMs: 30_000 });

    const file = path.join(dags, 'edited.mjs');
    writeFileSync(file, readFileSync(file, 'utf8').replace('retries: 0', 'retries: 1'));
    await processDagFolder(db, dags);
    // What the worker and its runners know of a DAG file is looked at again once a second (each
    // may report what it saw up to a second before): the edit counts for tasks starting after both.
    const editedAt = Date.now();
    await waitFor(async () => Date.now() - editedAt > 2 * WORKER_RECHECK_MS + 100, { what: 'two recheck intervals after the edit' });
    const after = await triggerDagRun(db, 'edited', { runId: 'after_the_edit' });
    await waitFor(async () => (await flakyState(after)) === 'up_for_retry', { what: 'flaky up for retry, as the edit allows', timeoutMs: 30_000 });
    await stop();
  }, 60_000);

  it('sees an edit of a module the DAG file imports, not only of the DAG file: in DAG processing, and in the tasks starting after it', async () => {
    const db = await scratch.database('sqlite');
    const project = scratch.dir('helper-edit');
    const dags = path.join(project, 'dags');
    const lib = path.join(project, 'lib');
    mkdirSync(dags);
    mkdirSync(lib);
    // The DAG file imports tasks.ts, which imports label.ts: an edit of either must be seen.
    const writeLib = (taskIds: string[], label: string) => {
      writeFileSync(path.join(lib, 'label.ts'), `export const label: string = ${JSON.stringify(label)};\n`);
      writeFileSync(
        path.join(lib, 'tasks.ts'),
        `import { label } from './label.ts';\nexport const taskIds: string[] = ${JSON.stringify(taskIds)};\nexport const labelNow = (): string => label;\n`,
      );
    };
    writeLib(['a'], 'v1');
    writeFileSync(
      path.join(dags, 'uses_lib.ts'),
      `import { Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
import { labelNow, taskIds } from '../lib/tasks.ts';
export const dag = new Dag({ dagId: 'uses_lib' });
for (const taskId of taskIds) dag.add(new FunctionOperator({ taskId, fn: () => labelNow() }));
`,
    );
    await processDagFolder(db, dags);
    const { stop } = await schedulerAndWorker(db, dags);
    const returned = async (runId: string) =>
      Object.fromEntries(
        (await db.db.selectFrom('task_instance').select(['task_id', 'state', 'return_value']).where('run_id', '=', runId).execute()).map(
          (row) => [row.task_id, row.state === 'success' ? JSON.parse(row.return_value!) : row.state] as const,
        ),
      );
    const first = await triggerDagRun(db, 'uses_lib');
    await waitFor(async () => (await returned(first)).a === 'v1', { what: 'the first run returning v1', timeoutMs: 30_000 });

    writeLib(['a', 'b'], 'v2');
    // DAG processing (this process, as a scheduler's would be: it has loaded both modules) sees the new task.
    await processDagFolder(db, dags);
    const serialized = await db.db.selectFrom('serialized_dag').select('data').where('dag_id', '=', 'uses_lib').executeTakeFirstOrThrow();
    expect(serialized.data).toContain('"b"');
    // The worker and its runners look again at most once a second.
    const editedAt = Date.now();
    await waitFor(async () => Date.now() - editedAt > 2 * WORKER_RECHECK_MS + 100, { what: 'two recheck intervals after the edit' });
    const after = await triggerDagRun(db, 'uses_lib', { runId: 'after_the_edit' });
    await waitFor(async () => Object.keys(await returned(after)).length === 2 && Object.values(await returned(after)).every((value) => value === 'v2'), {
      what: 'both tasks of the run after the edit returning v2',
      timeoutMs: 30_000,
    });
    await stop();
  }, 60_000);

  it('are replaced after --runner-max-tasks tasks, and none is left once the worker stops', async () => {
    const db = await scratch.database('sqlite');
    const dags = await withDag(
      db,
      'recycle',
      `${NOTE_OPERATOR}const dag = new Dag({ dagId: 'recycle' });
let last = null;
for (let i = 0; i < 6; i++) {
  const task = new Note({ taskId: 'note_' + i });
  dag.add(task);
  if (last) last.before(task);
  last = task;
}
export { dag };
`,
    );
    const { worker, stop } = await schedulerAndWorker(db, dags, ['--runner-max-tasks', '2']);
    // One runner starts with the worker, so the first task need not wait for one.
    await waitFor(() => runnersOf(worker.pid!).length === 1, { what: 'a runner started with the worker', timeoutMs: 10_000 });
    await triggerDagRun(db, 'recycle');
    await waitFor(async () => Object.values(await states(db)).filter((state) => state === 'success').length === 6, {
      what: 'six tasks done one after another',
      timeoutMs: 30_000,
    });
    const pids = pidsLogged(dags);
    expect(pids).toHaveLength(6);
    const uses = new Map<number, number>();
    for (const pid of pids) uses.set(pid, (uses.get(pid) ?? 0) + 1);
    // No runner ran more than two (the spare may take a turn, so there may be more runners).
    expect(Math.max(...uses.values())).toBeLessThanOrEqual(2);
    expect(uses.size).toBeGreaterThanOrEqual(3);
    expect(pids).not.toContain(worker.pid);
    await stop();
    for (const pid of uses.keys()) await waitFor(() => !alive(pid), { what: `runner ${pid} gone`, timeoutMs: 5_000 });
  }, 90_000);
});

describe("a DAG file's deferflow, on sqlite", () => {
  it.each([
    ['in a runner process', RUNNER_PROCESSES],
    ["on the worker's loop", { DEFERFLOW_TASK_ISOLATION: 'none' }],
  ])(
    "is the runtime's own module, not a second copy compiled for it (%s)",
    async (_where, env) => {
      const db = await scratch.database('sqlite');
      const dags = await withDag(
        db,
        'same',
        `import { DateTimeTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
// import() always gives the process's own ES modules; what the file imported must be the same.
class Same extends BaseOperator {
  async execute() {
    const api = await import(${JSON.stringify(PACKAGE_ENTRY)});
    const triggers = await import(${JSON.stringify(PACKAGE_TRIGGERS)});
    return { dag: api.Dag === Dag, operator: api.BaseOperator === BaseOperator, trigger: triggers.DateTimeTrigger === DateTimeTrigger };
  }
}
export const dag = new Dag({ dagId: 'same' }).add(new Same({ taskId: 'same' }));
`,
      );
      const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'same', '--exit-when-done'], env);
      expect((await standalone.exit).code).toBe(0);
      const row = await db.db.selectFrom('task_instance').select(['state', 'return_value']).executeTakeFirstOrThrow();
      expect({ state: row.state, returned: JSON.parse(row.return_value!) }).toEqual({
        state: 'success',
        returned: { dag: true, operator: true, trigger: true },
      });
    },
    60_000,
  );
});

describe('a task runner, on sqlite', () => {
  it("loads deferflow's authoring API and no database code, and has no compiler process of its own; the rest comes with a first call, and openDatabase before it is a coded error", async () => {
    const db = await scratch.database('sqlite');
    const dags = scratch.dir('light');
    const hooks = scratch.dir('light-hooks');
    // Every process (NODE_OPTIONS reaches the runners the worker forks) writes down, at exit, the
    // packages in its require cache by pid: the drivers and the metrics client are CommonJS (the
    // database layer, with kysely, is in deferflow's bundle and loads them). The task writes them
    // down at its first call.
    const record = path.join(hooks, 'loaded.txt');
    writeFileSync(record, '');
    writeFileSync(
      path.join(hooks, 'register.mjs'),
      `import { createRequire } from 'node:module';\nimport { appendFileSync } from 'node:fs';\nprocess.on('exit', () => appendFileSync(${JSON.stringify(record)}, Object.keys(createRequire(import.meta.url).cache).map((file) => process.pid + ' ' + file + '\\n').join('')));\n`,
    );
    // A TypeScript DAG file, as \`deferflow init\` writes them.
    writeFileSync(
      path.join(dags, 'light.ts'),
      `import { appendFileSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { BaseOperator, Dag, latestSignalVersion, listSignals, openDatabase } from ${JSON.stringify(PACKAGE_ENTRY)};
class Light extends BaseOperator {
  async execute() {
    let before: unknown = null;
    try {
      before = typeof openDatabase;
    } catch (error) {
      before = (error as { code?: string }).code;
    }
    appendFileSync(${JSON.stringify(record)}, Object.keys(createRequire(import.meta.url).cache).map((file) => process.pid + ' ' + file + '\\n').join('') + process.pid + ' first call\\n');
    // The runner's own child processes (its worker compiled this file: no esbuild service here).
    const children = readFileSync('/proc/self/task/' + process.pid + '/children', 'utf8').trim();
    // Any function of deferflow that returns a promise loads the rest of it (this one then fails: no database given).
    await listSignals(null as never, 'light').catch(() => {});
    const database = openDatabase(${JSON.stringify(db.url)});
    const version = await latestSignalVersion(database, 'light');
    await database.close();
    return { pid: process.pid, before, version, children };
  }
}
export const dag = new Dag({ dagId: 'light' }).add(new Light({ taskId: 'light' }));
`,
    );
    await processDagFolder(db, dags);
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'light', '--exit-when-done'], {
      ...RUNNER_PROCESSES,
      NODE_OPTIONS: `--import ${path.join(hooks, 'register.mjs')}`,
    });
    expect((await standalone.exit).code).toBe(0);
    const row = await db.db.selectFrom('task_instance').select(['state', 'return_value']).executeTakeFirstOrThrow();
    expect(row.state).toBe('success');
    const returned = JSON.parse(row.return_value!) as { pid: number; before: unknown; version: number };
    expect(returned).toMatchObject({ before: 'DF_NOT_IN_TASK_RUNNER', version: 0, children: '' });
    expect(returned.pid).not.toBe(standalone.pid);

    const lines = readFileSync(record, 'utf8').split('\n');
    const runner = lines.filter((line) => line.startsWith(`${returned.pid} `));
    const mark = runner.indexOf(`${returned.pid} first call`);
    expect(mark).toBeGreaterThan(0);
    const heavy = (loaded: string[]) =>
      ['/node_modules/better-sqlite3/', '/node_modules/pg/', '/node_modules/prom-client/'].filter((part) => loaded.some((line) => line.includes(part)));
    // The records are seen working: the runner had loaded its logger, the standalone process the driver.
    expect(runner.slice(0, mark).some((line) => line.includes('/node_modules/pino/'))).toBe(true);
    expect(heavy(lines.filter((line) => line.startsWith(`${standalone.pid} `)))).toContain('/node_modules/better-sqlite3/');
    expect(heavy(runner.slice(0, mark))).toEqual([]);
    expect(heavy(runner.slice(mark))).toContain('/node_modules/better-sqlite3/');
  }, 60_000);
});

describe('standalone with a CPU-bound task, on sqlite', () => {
  it("keeps its triggerer's moments: triggers due while a task spins the CPU fire on time", async () => {
    const db = await scratch.database('sqlite');
    // The database's own clock marks each move of a deferred task instance to scheduled.
    await sql`create table moved (task_instance_id integer not null, at text not null)`.execute(db.db);
    await sql`create trigger moved_audit after update of state on task_instance
      when old.state = 'deferred' and new.state = 'scheduled'
      begin insert into moved values (new.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')); end`.execute(db.db);
    const dags = scratch.dir('standalone-spin');
    const flag = path.join(dags, 'spinning');
    writeFileSync(
      path.join(dags, 'spin.mjs'),
      `import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { DateTimeTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Spin extends BaseOperator {
  execute() {
    writeFileSync(${JSON.stringify(flag)}, '');
    const until = Date.now() + 8_000;
    while (Date.now() < until) {}
    return 'spun';
  }
}
class WaitWhileSpinning extends BaseOperator {
  async execute(context) {
    while (!existsSync(${JSON.stringify(flag)})) await new Promise((resolve) => setTimeout(resolve, 10));
    const moment = Date.now() + 1_500 + 400 * Number(this.taskId.split('_')[1]);
    appendFileSync(${JSON.stringify(path.join(dags, 'moments.log'))}, context.taskInstance.id + ' ' + moment + '\\n');
    return this.defer({ trigger: new DateTimeTrigger({ moment: new Date(moment) }), method: 'done' });
  }
  done() { return 'on time'; }
}
const dag = new Dag({ dagId: 'spin_and_wait' }).add(new Spin({ taskId: 'spin' }));
for (let i = 0; i < 5; i++) dag.add(new WaitWhileSpinning({ taskId: 'wait_' + i }));
export { dag };
`,
    );
    const run = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'spin_and_wait', '--exit-when-done'], RUNNER_PROCESSES);
    const exit = await run.exit;
    expect(exit.code, run.describe()).toBe(0);
    const moments = new Map(
      readFileSync(path.join(dags, 'moments.log'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => line.split(' ').map(Number) as [number, number]),
    );
    const moved = await sql<{ task_instance_id: number; at: string }>`select task_instance_id, at from moved`.execute(db.db);
    const lateness = moved.rows.map((row) => Date.parse(row.at) - moments.get(Number(row.task_instance_id))!).sort((a, b) => a - b);
    expect(lateness).toHaveLength(5);
    // Never early; on time while the task spins (on the worker's own loop they would wait for it: seconds).
    expect(lateness[0]).toBeGreaterThanOrEqual(0);
    expect(lateness[2], `lateness of the five moves, ms: ${lateness.join(', ')}`).toBeLessThan(50);
    expect(lateness.at(-1), `lateness of the five moves, ms: ${lateness.join(', ')}`).toBeLessThan(1_000);
  }, 90_000);
});

/** The live task runner processes of worker `pid` (not its other children, such as esbuild's service). */
function runnersOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
      .filter((child) => alive(child) && readFileSync(`/proc/${child}/cmdline`, 'utf8').includes('task-runner-main'));
  } catch {
    return [];
  }
}
