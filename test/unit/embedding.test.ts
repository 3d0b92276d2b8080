// deferflow embedded in a user's own Node service: deferflow({...}) with options validated and
// frozen, and code that runs operators itself creating and reading task instances.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Duration } from 'luxon';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  BaseOperator,
  createTaskInstance,
  deferflow,
  deferTaskInstance,
  readTaskInstance,
  resumeTaskInstance,
  TaskDeferred,
  type Deferflow,
  type TaskContext,
} from '../../src/index.ts';
import { resolveDeferflowConfig } from '../../src/internals.ts';
import { EchoTrigger } from '../fixtures/custom-trigger-module.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { LogCapture, waitFor } from '../support/fixtures.ts';
import { PACKAGE_ENTRY } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';
import { health, scrape } from '../support/scrape.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/** Expects `action` to throw a DeferflowError with `code` whose message contains `text`. */
async function expectRefused(action: () => unknown, code: string, text: string): Promise<void> {
  let thrown: unknown = null;
  try {
    await action();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, `expected ${code}`).not.toBeNull();
  expect((thrown as { code?: string }).code).toBe(code);
  expect((thrown as Error).message).toContain(text);
}

describe('deferflow({...}) options', () => {
  it('apply defaults, take durations as luxon Durations or seconds, ignore the environment, and come back frozen', () => {
    process.env.DEFERFLOW_WORKER_CONCURRENCY = '7';
    try {
      const options = resolveDeferflowConfig({
        worker: { concurrency: 3, shutdownGrace: Duration.fromObject({ minutes: 1 }) },
        scheduler: false,
        triggerer: { heartbeatInterval: 2, blockThreshold: Duration.fromMillis(50), triggerModules: ['./t.ts'], triggerClasses: [EchoTrigger] },
      });
      expect(options.worker).toMatchObject({
        concurrency: 3,
        shutdownGraceMs: 60_000,
        pollIntervalMs: 1_000,
        dagsFolder: './dags',
        databaseUrl: 'sqlite:./deferflow.db',
      });
      expect(options.scheduler).toBeNull();
      expect(options.triggerer).toMatchObject({ heartbeatIntervalMs: 2_000, blockThresholdMs: 50, capacity: 1000, triggerModules: ['./t.ts'] });
      expect(options.triggerClasses).toEqual([EchoTrigger]);
      expect(Object.isFrozen(options) && Object.isFrozen(options.worker)).toBe(true);
      // Not 7: the embedded API reads only what it is given.
      expect(resolveDeferflowConfig({}).worker!.concurrency).toBe(16);
      // /metrics and /health: off unless asked for; then any free port on 127.0.0.1.
      expect(resolveDeferflowConfig({}).http).toBeNull();
      expect(resolveDeferflowConfig({ http: {} }).http).toEqual({ host: '127.0.0.1', port: 0, loopThresholdMs: 10_000, optional: false });
      expect(resolveDeferflowConfig({ http: { healthLoopThreshold: Duration.fromObject({ seconds: 3 }) } }).http!.loopThresholdMs).toBe(3_000);
    } finally {
      delete process.env.DEFERFLOW_WORKER_CONCURRENCY;
    }
  });

  it('refuse a mistyped or bad field by its name, before anything is opened or created', async () => {
    const dir = scratch.dir('refused');
    const databaseUrl = `sqlite:${path.join(dir, 'never.db')}`;
    await expectRefused(
      () => deferflow({ databaseUrl, worker: { concurency: 4 } as never }),
      'DF_INVALID_OPTION',
      'worker.concurency: is not an option (did you mean concurrency?); the options here are concurrency, pollInterval',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, worker: { concurrency: 0 } }),
      'DF_INVALID_OPTION',
      'worker.concurrency: expected a positive integer, got 0',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, scheduler: { pollInterval: '1s' as never } }),
      'DF_INVALID_OPTION',
      'scheduler.pollInterval: expected a luxon Duration or a number of seconds, got string "1s"',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, triggerer: { heartbeatInterval: 10, healthCheckThreshold: 5 } }),
      'DF_INVALID_OPTION',
      'triggerer.healthCheckThreshold: must be longer than heartbeat-interval',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, triggerer: { triggerClasses: [class NotATrigger {}] as never } }),
      'DF_INVALID_OPTION',
      'triggerer.triggerClasses[0]: expected a BaseTrigger subclass',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, http: { port: 70_000 } }),
      'DF_INVALID_OPTION',
      'http.port: expected a port (1-65535, or 0 for any free one), got 70000',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, http: { prot: 8080 } as never }),
      'DF_INVALID_OPTION',
      'http.prot: is not an option (did you mean port?)',
    );
    await expectRefused(
      () => deferflow({ databaseUrl, triggerer: { speed: 2 } as never }),
      'DF_INVALID_OPTION',
      'triggerer.speed: is not an option; the options here are',
    );
    await expectRefused(() => deferflow({ databaseUrl, dagsFolder: path.join(dir, 'missing') }), 'DF_INVALID_OPTION', 'does not exist');
    await expectRefused(() => deferflow({ databaseUrl, migrate: false, worker: false }), 'DF_DATABASE_NOT_MIGRATED', 'never.db');
    expect(existsSync(path.join(dir, 'never.db'))).toBe(false);
  });
});

// A DAG file as a user writes it, in a folder of its own, deferring on a trigger class the app
// is given directly.
const DAG = `import { BaseOperator, BaseTrigger, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class EchoTrigger extends BaseTrigger {
  static classpath = 'custom.EchoTrigger';
  constructor(kwargs) { super(); this.kwargs = kwargs; }
  serialize() { return { classpath: EchoTrigger.classpath, kwargs: this.kwargs }; }
  async *run() {}
}
class Echo extends BaseOperator {
  execute(context) { return this.defer({ trigger: new EchoTrigger({ message: 'run ' + context.dagRun.conf.n }), method: 'heard' }); }
  heard(_context, event) { return event; }
}
export const dag = new Dag({ dagId: 'embedded' }).add(new Echo({ taskId: 'echo' }));
`;

describe.each(testDialects)('deferflow embedded on %s', (dialect) => {
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
  });

  it('runs worker, scheduler and triggerer in this process: a deferring DAG run succeeds, and stop() ends every job row', async () => {
    const project = scratch.dir(`embedded-${dialect}`);
    mkdirSync(path.join(project, 'dags'));
    writeFileSync(path.join(project, 'dags/embedded.mjs'), DAG);
    const logs = new LogCapture();
    app = await deferflow({
      databaseUrl: await freshDatabaseUrl(dialect),
      dagsFolder: path.join(project, 'dags'),
      worker: { concurrency: 2, pollInterval: 0.2, shutdownGrace: 0 },
      scheduler: { pollInterval: Duration.fromMillis(200) },
      triggerer: { pollInterval: 0.2, triggerClasses: [EchoTrigger] },
      logger: pino({ level: 'info' }, logs),
      http: { port: 0 },
    });
    const runId = await app.triggerDagRun('embedded', { conf: { n: 7 } });
    expect(await app.waitForDagRun('embedded', runId)).toBe('success');
    // One endpoint for the process: a check per component, the metrics of all three.
    const base = `http://127.0.0.1:${app.httpAddress!.port}`;
    const probe = await waitFor(async () => {
      const answer = await health(base);
      return answer.status === 200 ? answer : null;
    });
    expect(Object.keys(probe.body.checks).sort()).toEqual(['event_loop', 'scheduler', 'triggerer', 'worker']);
    const metrics = await scrape(base);
    expect(metrics.value('deferflow_ti_finish_total', { state: 'success', operator: 'Echo' })).toBe(1);
    expect(metrics.value('deferflow_ti_finish_total', { state: 'deferred', operator: 'Echo' })).toBe(1);
    expect(metrics.value('deferflow_triggers_succeeded_total', { classpath: 'custom.EchoTrigger' })).toBe(1);
    expect(metrics.value('deferflow_dag_runs_finished_total', { state: 'success' })).toBe(1);
    const ti = await app.database.db.selectFrom('task_instance').select(['id']).where('run_id', '=', runId).executeTakeFirstOrThrow();
    expect(await readTaskInstance(app.database, ti.id)).toMatchObject({ state: 'success', returnValue: 'run 7', tryNumber: 1 });
    const jobIds = [app.worker!.jobId, app.scheduler!.jobId, app.triggerer!.jobId];
    const database = app.database;
    await app.stop({ keepDatabaseOpen: true });
    const jobs = await database.db.selectFrom('job').select(['id', 'state', 'end_date']).orderBy('id').execute();
    expect(jobs.map((job) => [job.id, job.state, job.end_date !== null])).toEqual(jobIds.sort().map((id) => [id, 'success', true]));
    await database.close();
    // Each component logs as a child naming it.
    expect(new Set(logs.lines.map((line) => line.component))).toEqual(new Set(['worker', 'scheduler', 'triggerer', 'dag-processor', 'http']));
    await expectRefused(() => app!.start(), 'DF_LIFECYCLE', 'deferflow already stopped');
  }, 60_000);

  it("answers a task's question with respondToInput: by DAG, run and task; the first response wins; the task resumes with it", async () => {
    const project = scratch.dir(`embedded-input-${dialect}`);
    mkdirSync(path.join(project, 'dags'));
    writeFileSync(
      path.join(project, 'dags/asks.mjs'),
      `import { Dag, InputOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
export const dag = new Dag({ dagId: 'asks' }).add(new InputOperator({ taskId: 'size', subject: 'How many?', fields: [{ name: 'n', type: 'number' }] }));
`,
    );
    app = await deferflow({
      databaseUrl: await freshDatabaseUrl(dialect),
      dagsFolder: path.join(project, 'dags'),
      worker: { concurrency: 2, pollInterval: 0.2, shutdownGrace: 0 },
      scheduler: { pollInterval: 0.2 },
      triggerer: false,
      logger: pino({ level: 'warn' }),
    });
    const runId = await app.triggerDagRun('asks');
    const state = async () => (await app!.database.db.selectFrom('task_instance').select('state').where('run_id', '=', runId).executeTakeFirst())?.state;
    await waitFor(async () => (await state()) === 'awaiting_input', { timeoutMs: 20_000, what: 'the task awaiting input' });
    await expectRefused(
      () => app!.respondToInput({ dagId: 'asks', runId, taskId: 'size' }, { values: { n: 'many' }, by: 'ann' }),
      'DF_INVALID_INPUT_RESPONSE',
      'expected a number',
    );
    const response = await app.respondToInput({ dagId: 'asks', runId, taskId: 'size' }, { values: { n: 5 }, by: 'ann' });
    expect(response).toMatchObject({ values: { n: 5 }, by: 'ann', source: 'api' });
    await expectRefused(() => app!.respondToInput({ dagId: 'asks', runId, taskId: 'size' }, { values: { n: 6 }, by: 'ben' }), 'DF_INPUT_ALREADY_GIVEN', 'ann');
    expect(await app.waitForDagRun('asks', runId)).toBe('success');
    const ti = await app.database.db.selectFrom('task_instance').select('id').where('run_id', '=', runId).executeTakeFirstOrThrow();
    expect((await readTaskInstance(app.database, ti.id))?.returnValue).toMatchObject({ values: { n: 5 }, by: 'ann' });
    await expectRefused(() => app!.respondToInput({ dagId: 'asks', runId, taskId: 'nope' }, { by: 'ann' }), 'DF_NOT_AWAITING_INPUT', 'no task instance');
  }, 60_000);

  it('lets code that runs operators itself create a task instance, defer it onto an embedded triggerer, read it back and resume it', async () => {
    const databaseUrl = await freshDatabaseUrl(dialect);
    app = await deferflow({
      databaseUrl,
      worker: false,
      scheduler: false,
      triggerer: { pollInterval: 0.1, triggerClasses: [EchoTrigger] },
      logger: pino({ level: 'silent' }),
    });
    class Shout extends BaseOperator {
      override execute(): never {
        return this.defer({ trigger: new EchoTrigger({ message: 'hello' }), method: 'heard', kwargs: { loud: true } });
      }
      heard(_context: TaskContext, event: string, kwargs: { loud: boolean }) {
        return kwargs.loud ? event.toUpperCase() : event;
      }
    }
    const operator = new Shout({ taskId: 'shout' });
    const id = await createTaskInstance(app.database, { dagId: 'my_service', taskId: 'shout', runId: 'job-42' });
    expect(await readTaskInstance(app.database, id)).toMatchObject({
      state: 'running',
      tryNumber: 1,
      dagId: 'my_service',
      runId: 'job-42',
      mapIndex: 0,
      nextMethod: null,
    });
    let deferral: TaskDeferred | null = null;
    try {
      operator.execute();
    } catch (thrown) {
      if (thrown instanceof TaskDeferred) deferral = thrown;
    }
    await deferTaskInstance(app.database, id, deferral!);
    app.triggerer!.wake();
    const resumed = await waitFor(
      async () => {
        const ti = await readTaskInstance(app!.database, id);
        return ti?.state === 'scheduled' ? ti : null;
      },
      { what: 'the triggerer to fire the echo' },
    );
    expect(resumed).toMatchObject({ nextMethod: 'heard', nextKwargs: { loud: true, event: 'hello' }, triggerId: null });
    const context: TaskContext = { taskInstance: { id, dagId: 'my_service', taskId: 'shout', runId: 'job-42', mapIndex: 0, tryNumber: 1 } };
    expect(await resumeTaskInstance(app.database, id, operator, context)).toBe('HELLO');

    await expectRefused(
      () => createTaskInstance(app!.database, { dagId: 'my_service', taskId: 'shout', runId: 'job-42' }),
      'DF_TASK_INSTANCE_STATE',
      `already exists (id ${id}, scheduled)`,
    );
    await expectRefused(
      () => createTaskInstance(app!.database, { dagId: '', taskId: 'x', runId: 'r' }),
      'DF_INVALID_TASK_INSTANCE',
      'dagId must be a non-empty string',
    );
    await expectRefused(
      () => createTaskInstance(app!.database, { dagId: 'd', taskId: 'x', runId: 'r', state: 'paused' as never }),
      'DF_INVALID_TASK_INSTANCE',
      'state must be one of',
    );
    expect(await readTaskInstance(app.database, id + 1000)).toBeNull();
  }, 30_000);
});
