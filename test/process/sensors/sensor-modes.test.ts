// Sensors end to end: worker, scheduler and triggerer (deferflow embedded, as a user runs it) on
// both dialects, with a sensor class and DAGs that live in a project of their own.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { DateTime } from 'luxon';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { deferflow, openDatabase, type Deferflow, type DeferflowConfig } from '../../../src/index.ts';
import { fromDbTime } from '../../../src/internals.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects, type TestDialect } from '../../support/databases.ts';
import { LogCapture, parsePlain, waitFor } from '../../support/fixtures.ts';
import { backoffPause } from '../../../src/authoring/sensors/poke-result.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const entry = JSON.stringify(PACKAGE_ENTRY);

// A user's sensor: done once a flag file exists; every poke is counted in `${flag}.pokes`, with
// where it ran (the consolidated poke is made with the task id __consolidated_poke__).
const SENSORS = `import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { BaseSensorOperator, PokeReturnValue } from ${entry};
export class PlainSensor extends BaseSensorOperator {
  poke() { return true; }
}
export class FlagSensor extends BaseSensorOperator {
  static classpath = 'project.FlagSensor';
  static pokeContextFields = ['flag'];
  constructor({ flag, ...options }) { super(options); this.flag = flag; }
  poke() {
    appendFileSync(this.flag + '.pokes', (this.taskId === '__consolidated_poke__' ? 'triggerer' : 'worker') + ' ' + Date.now() + '\\n');
    if (existsSync(this.flag + '.broken')) throw new Error('flag unreadable');
    if (existsSync(this.flag + '.slow')) for (const until = Date.now() + 300; Date.now() < until; );
    return existsSync(this.flag) ? new PokeReturnValue(true, readFileSync(this.flag, 'utf8')) : false;
  }
}
`;

interface SensorTask {
  readonly taskId: string;
  readonly flag: string;
  readonly options?: Record<string, unknown>;
}

/** A DAG of FlagSensor tasks, with an `after` task downstream of every one (all_success). */
function dagSource(dagId: string, sensors: readonly SensorTask[]): string {
  return `import { Dag, FunctionOperator } from ${entry};
import { FlagSensor } from '../sensors.mjs';
const dag = new Dag({ dagId: ${JSON.stringify(dagId)} });
const after = new FunctionOperator({ taskId: 'after', fn: () => 'after ran' });
dag.add(after);
for (const s of ${JSON.stringify(sensors)}) {
  const sensor = new FlagSensor({ taskId: s.taskId, flag: s.flag, ...s.options });
  dag.add(sensor);
  sensor.before(after);
}
export { dag };
`;
}

interface Project {
  readonly dir: string;
  readonly flag: (name: string) => string;
  /**
   * Creates a flag with its content in one step (written aside, then renamed): a poke runs at
   * any moment, and one that found the file created but not yet written would return ''.
   */
  raise(name: string, content: string): void;
  pokes(name: string): { worker: number; triggerer: number; times: number[]; triggererTimes: number[] };
}

function project(name: string, dags: Record<string, readonly SensorTask[]>): Project {
  const dir = scratch.dir(name);
  mkdirSync(path.join(dir, 'dags'));
  writeFileSync(path.join(dir, 'sensors.mjs'), SENSORS);
  for (const [dagId, sensors] of Object.entries(dags)) {
    writeFileSync(
      path.join(dir, 'dags', `${dagId}.mjs`),
      dagSource(
        dagId,
        sensors.map((sensor) => ({ ...sensor, flag: path.join(dir, sensor.flag) })),
      ),
    );
  }
  return {
    dir,
    flag: (flagName) => path.join(dir, flagName),
    raise(flagName, content) {
      const aside = path.join(dir, `.${flagName}.writing`);
      writeFileSync(aside, content);
      renameSync(aside, path.join(dir, flagName));
    },
    pokes(flagName) {
      const file = path.join(dir, `${flagName}.pokes`);
      const lines = existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n') : [];
      return {
        worker: lines.filter((line) => line.startsWith('worker')).length,
        triggerer: lines.filter((line) => line.startsWith('triggerer')).length,
        times: lines.map((line) => Number(line.split(' ')[1])),
        triggererTimes: lines.filter((line) => line.startsWith('triggerer')).map((line) => Number(line.split(' ')[1])),
      };
    },
  };
}

describe.each(testDialects)('sensors on %s', (dialect: TestDialect) => {
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
  });

  async function start(
    proj: Project,
    worker: DeferflowConfig['worker'] = {},
    triggerer: DeferflowConfig['triggerer'] = {},
  ): Promise<{ app: Deferflow; logs: LogCapture; url: string }> {
    const logs = new LogCapture();
    const url = await freshDatabaseUrl(dialect);
    app = await deferflow({
      databaseUrl: url,
      dagsFolder: path.join(proj.dir, 'dags'),
      worker: { concurrency: 4, pollInterval: 0.1, shutdownGrace: 0, taskIsolation: 'none', ...(worker === false ? {} : worker) },
      scheduler: { pollInterval: 0.1 },
      triggerer: { pollInterval: 0.1, triggerModules: [path.join(proj.dir, 'sensors.mjs')], ...(triggerer === false ? {} : triggerer) },
      logger: pino({ level: 'info' }, logs),
    });
    return { app, logs, url };
  }

  // A run is named by its DAG and its id: runs of two DAGs triggered in the same millisecond
  // share the id manual__<logical date> (as in Airflow, run ids are unique per DAG only).
  const states = async (running: Deferflow, dagId: string, runId: string) =>
    Object.fromEntries(
      (
        await running.database.db.selectFrom('task_instance').select(['task_id', 'state']).where('dag_id', '=', dagId).where('run_id', '=', runId).execute()
      ).map((row) => [row.task_id, row.state]),
    );
  const row = (running: Deferflow, dagId: string, runId: string, taskId: string) =>
    running.database.db
      .selectFrom('task_instance')
      .selectAll()
      .where('dag_id', '=', dagId)
      .where('run_id', '=', runId)
      .where('task_id', '=', taskId)
      .executeTakeFirstOrThrow();

  it('poke mode holds its slot between pokes; reschedule mode gives it back with a reschedule row per poke; both succeed once the flag appears', async () => {
    const proj = project(`modes-${dialect}`, {
      poking: [{ taskId: 'wait', flag: 'poke.flag', options: { mode: 'poke', pokeInterval: 0.2 } }],
      rescheduling: [{ taskId: 'wait', flag: 'resched.flag', options: { mode: 'reschedule', pokeInterval: 0.2 } }],
    });
    const { app, url } = await start(proj);
    const poking = await app.triggerDagRun('poking');
    const rescheduling = await app.triggerDagRun('rescheduling');
    await waitFor(() => proj.pokes('poke.flag').worker >= 3 && proj.pokes('resched.flag').worker >= 3, { what: 'three pokes of each' });
    expect((await row(app, 'poking', poking, 'wait')).state).toBe('running');
    await waitFor(async () => (await row(app, 'rescheduling', rescheduling, 'wait')).state === 'up_for_reschedule', {
      what: 'the rescheduling sensor between pokes',
    });
    // Between pokes (or in the next one) it shows the try it is on, not the try it gave back.
    const betweenPokes = spawnDeferflow(['tasks', 'list', '--db', url, '--dag', 'rescheduling', '--run', rescheduling, '--json']);
    expect((await betweenPokes.exit).code).toBe(0);
    const listedWait = (JSON.parse(betweenPokes.text.join('')) as { task_id: string; state: string; try_number: number }[]).find((ti) => ti.task_id === 'wait');
    expect(listedWait?.state).not.toBe('success');
    expect(listedWait?.try_number).toBe(1);
    proj.raise('poke.flag', 'poked');
    proj.raise('resched.flag', 'rescheduled');
    expect(await app.waitForDagRun('poking', poking)).toBe('success');
    expect(await app.waitForDagRun('rescheduling', rescheduling)).toBe('success');
    for (const [dagId, runId, value] of [
      ['poking', poking, 'poked'],
      ['rescheduling', rescheduling, 'rescheduled'],
    ] as const) {
      const wait = await row(app, dagId, runId, 'wait');
      expect([wait.state, wait.try_number, JSON.parse(wait.return_value!)]).toEqual(['success', 1, value]);
    }
    const reschedules = await app.database.db
      .selectFrom('task_reschedule')
      .innerJoin('task_instance', 'task_instance.id', 'task_reschedule.task_instance_id')
      .select(['task_instance.dag_id', 'task_instance.run_id', 'task_reschedule.try_number'])
      .execute();
    expect(reschedules.filter((r) => r.dag_id === 'poking' && r.run_id === poking)).toEqual([]);
    const ofRescheduling = reschedules.filter((r) => r.dag_id === 'rescheduling' && r.run_id === rescheduling);
    expect(ofRescheduling.length).toBeGreaterThanOrEqual(2);
    expect(new Set(ofRescheduling.map((r) => r.try_number))).toEqual(new Set([1]));
    // Every poke of the rescheduling sensor but the last ended its run with a reschedule row.
    expect(ofRescheduling.length).toBe(proj.pokes('resched.flag').worker - 1);
    // What the CLI shows of it: the count in tasks list, the history in tasks reschedules.
    const listed = spawnDeferflow(['tasks', 'list', '--db', url, '--dag', 'rescheduling', '--run', rescheduling]);
    expect((await listed.exit).code).toBe(0);
    expect(listed.text[0]).toMatch(/^DAG ID +TASK ID +STATE +TRY +RESCHEDULES +HOST$/);
    expect(listed.text.find((line) => / wait /.test(line))).toMatch(new RegExp(`^rescheduling +wait +success +1 +${ofRescheduling.length} `));
    const history = spawnDeferflow(['tasks', 'reschedules', '--db', url, '--dag', 'rescheduling', '--run', rescheduling, '--task', 'wait']);
    expect((await history.exit).code).toBe(0);
    expect(history.text[0]).toBe(`${ofRescheduling.length} reschedule(s) of rescheduling.wait (run ${rescheduling}), now success, try 1`);
    expect(history.text[1]).toMatch(/^TRY +POKE STARTED +POKE ENDED +NEXT POKE AT$/);
    expect(history.text.slice(2).filter((line) => /^1 +\d{4}-/.test(line))).toHaveLength(ofRescheduling.length);
    const none = spawnDeferflow(['tasks', 'reschedules', '--db', url, '--dag', 'poking', '--run', poking, '--task', 'wait', '--json']);
    expect((await none.exit).code).toBe(0);
    expect(JSON.parse(none.text.join(''))).toEqual([]);
  }, 60_000);

  it('times out counting from the first poke across reschedules and deferrals: failed without a retry, or skipped with softFail (downstream follows its trigger rule)', async () => {
    const proj = project(`timeouts-${dialect}`, {
      hard: [
        { taskId: 'resched', flag: 'never.flag', options: { mode: 'reschedule', pokeInterval: 0.3, timeout: 1.2, retries: 3 } },
        { taskId: 'deferred', flag: 'never.flag', options: { mode: 'deferrable', pokeInterval: 0.3, timeout: 1.2, retries: 3 } },
      ],
      soft: [
        { taskId: 'resched', flag: 'never.flag', options: { mode: 'reschedule', pokeInterval: 0.3, timeout: 1.2, softFail: true } },
        { taskId: 'deferred', flag: 'never.flag', options: { mode: 'deferrable', pokeInterval: 0.3, timeout: 1.2, softFail: true } },
        { taskId: 'poked', flag: 'never.flag', options: { mode: 'poke', pokeInterval: 0.3, timeout: 1.2, softFail: true } },
      ],
    });
    const { app, logs } = await start(proj);
    const hard = await app.triggerDagRun('hard');
    const soft = await app.triggerDagRun('soft');
    const startedAt = Date.now();
    expect(await app.waitForDagRun('hard', hard)).toBe('failed');
    expect(await app.waitForDagRun('soft', soft)).toBe('success');
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1_200);
    expect(await states(app, 'hard', hard)).toEqual({ resched: 'failed', deferred: 'failed', after: 'upstream_failed' });
    expect(await states(app, 'soft', soft)).toEqual({ resched: 'skipped', deferred: 'skipped', poked: 'skipped', after: 'skipped' });
    // No retry: retries: 3, yet one try each.
    for (const taskId of ['resched', 'deferred']) expect((await row(app, 'hard', hard, taskId)).try_number).toBe(1);
    await logs.waitForLines((line) => line.code === 'DF_SENSOR_TIMEOUT', { atLeast: 2, what: 'both timeouts logged' });
    const timeouts = logs.matching((line) => line.code === 'DF_SENSOR_TIMEOUT');
    expect(timeouts.length).toBe(2);
    // The deferred sensor waited on the triggerer: pokes there too, after its first one on the worker.
    expect(proj.pokes('never.flag').triggerer).toBeGreaterThan(0);
  }, 60_000);

  it('a triggerer that does not allow the sensor class fails its task instances (DF_UNKNOWN_SENSOR); a poke blocking the loop is named by class and poke context', async () => {
    const proj = project(`unknown-${dialect}`, {
      slow: [{ taskId: 'wait', flag: 'slow.flag', options: { mode: 'deferrable', pokeInterval: 0.2 } }],
    });
    writeFileSync(proj.flag('slow.flag.slow'), '');
    // First a triggerer that allows nothing of the project's.
    const { app: strict, logs } = await start(proj, {}, { triggerModules: [] });
    const refused = await strict.triggerDagRun('slow');
    expect(await strict.waitForDagRun('slow', refused)).toBe('failed');
    const failures = await logs.waitForLines((line) => typeof line.error === 'string' && line.error.includes('DF_UNKNOWN_SENSOR'), {
      what: 'the refused sensor logged',
    });
    expect(String(failures[0]!.error)).toContain('sensor class "project.FlagSensor" is not allowed on this triggerer');
    await strict.stop();
    app = null;
    // Then one that allows it, warning at 0.1 s: the slow poke is named.
    const { app: allowing, logs: allowingLogs } = await start(proj, {}, { blockThreshold: 0.1 });
    const named = await allowing.triggerDagRun('slow');
    await waitFor(() => allowingLogs.matching((line) => typeof line.blocked_ms === 'number' && line.wait !== undefined).length > 0, {
      what: 'the blocked-loop warning',
    });
    const warning = allowingLogs.matching((line) => typeof line.blocked_ms === 'number' && line.wait !== undefined)[0]!;
    expect(warning.wait).toBe(`sensor project.FlagSensor {"flag":${JSON.stringify(proj.flag('slow.flag'))}}`);
    expect(String(warning.msg)).toContain('(deferflow.SensorPokeTrigger: sensor project.FlagSensor');
    proj.raise('slow.flag', 'done');
    expect(await allowing.waitForDagRun('slow', named)).toBe('success');
  }, 60_000);

  it('FileSensor in every mode waits out a file being written slowly: done once it is big enough and unchanged for unchangedFor', async () => {
    const proj = project(`files-${dialect}`, {});
    const file = path.join(proj.dir, 'landing', 'report.csv');
    mkdirSync(path.dirname(file));
    writeFileSync(
      path.join(proj.dir, 'dags', 'files.mjs'),
      `import { Dag } from ${entry};\nimport { FileSensor } from ${JSON.stringify(PACKAGE_TRIGGERS)};\n` +
        `export const dag = new Dag({ dagId: 'files' }).add(...['poke', 'reschedule', 'deferrable'].map((mode) => ` +
        `new FileSensor({ taskId: mode, mode, filepath: ${JSON.stringify(file)}, pokeInterval: 0.1, minSize: 20, unchangedFor: 0.5 })));\n`,
    );
    const { app } = await start(proj);
    const runId = await app.triggerDagRun('files');
    // 4 bytes every 100 ms: past minSize after 0.5 s, still changing until about 3 s (well after
    // each mode's first poke, however long its runner process takes to start).
    for (let i = 0; i < 30; i++) {
      appendFileSync(file, 'xxxx');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const lastWrite = statSync(file).mtimeMs;
    expect(await app.waitForDagRun('files', runId)).toBe('success');
    const rows = await app.database.db
      .selectFrom('task_instance')
      .select(['task_id', 'state', 'end_date', 'return_value'])
      .where('run_id', '=', runId)
      .execute();
    for (const ti of rows) {
      expect([ti.task_id, ti.state, JSON.parse(ti.return_value!)]).toEqual([ti.task_id, 'success', { path: file }]);
      // Not before the file had rested 0.5 s (the database keeps milliseconds).
      expect(fromDbTime(ti.end_date!)).toBeGreaterThanOrEqual(Math.floor(lastWrite) + 500);
    }
    // The deferrable one waited on the triggerer (its task log says it deferred), the others on the worker.
    const deferredLines = await app.database.db
      .selectFrom('task_log')
      .innerJoin('task_instance', 'task_instance.id', 'task_log.task_instance_id')
      .select(['task_instance.task_id', 'task_log.message'])
      .where('task_instance.run_id', '=', runId)
      .where('task_log.message', 'like', '%deferred; resumes at sensorDone%')
      .execute();
    expect(deferredLines.map((line) => line.task_id)).toEqual(['deferrable']);
  }, 60_000);

  it('TimeDeltaSensor, DateTimeSensor and TimeSensor wait for a moment worked out from the run, in every mode', async () => {
    const proj = project(`times-${dialect}`, {});
    // A time of day 2 s from now in Kolkata, on the day the (manual) run's interval ends there.
    let now = DateTime.now().setZone('Asia/Kolkata');
    if (now.plus({ seconds: 3 }).day !== now.day) {
      await new Promise((resolve) => setTimeout(resolve, 4_000)); // do not straddle midnight
      now = DateTime.now().setZone('Asia/Kolkata');
    }
    const timeOfDay = now.plus({ seconds: 2 }).toFormat('HH:mm:ss');
    writeFileSync(
      path.join(proj.dir, 'dags', 'times.mjs'),
      `import { Dag } from ${entry};\nimport { DateTimeSensor, TimeDeltaSensor, TimeSensor } from ${JSON.stringify(PACKAGE_TRIGGERS)};\n` +
        `const dag = new Dag({ dagId: 'times' });\n` +
        `for (const mode of ['poke', 'reschedule', 'deferrable']) {\n` +
        `  dag.add(new TimeDeltaSensor({ taskId: 'delta_' + mode, mode, delta: 1, pokeInterval: 30 }));\n` +
        `  dag.add(new DateTimeSensor({ taskId: 'moment_' + mode, mode, targetTime: (run) => run.logicalDate.plus({ seconds: 1.5 }), pokeInterval: 30 }));\n` +
        `  dag.add(new TimeSensor({ taskId: 'clock_' + mode, mode, targetTime: ${JSON.stringify(timeOfDay)}, timezone: 'Asia/Kolkata', pokeInterval: 30 }));\n` +
        `}\nexport { dag };\n`,
    );
    const { app } = await start(proj, { concurrency: 9 });
    const runId = await app.triggerDagRun('times');
    expect(await app.waitForDagRun('times', runId)).toBe('success');
    const run = await app.database.db.selectFrom('dag_run').select('logical_date').where('run_id', '=', runId).executeTakeFirstOrThrow();
    const logical = fromDbTime(run.logical_date);
    const clock = DateTime.fromFormat(timeOfDay, 'HH:mm:ss', { zone: 'Asia/Kolkata' }).set({ year: now.year, month: now.month, day: now.day }).toMillis();
    const rows = await app.database.db.selectFrom('task_instance').select(['task_id', 'state', 'end_date']).where('run_id', '=', runId).execute();
    expect(rows).toHaveLength(9);
    for (const ti of rows) {
      const target = ti.task_id.startsWith('delta') ? logical + 1_000 : ti.task_id.startsWith('moment') ? logical + 1_500 : clock;
      expect([ti.task_id, ti.state]).toEqual([ti.task_id, 'success']);
      expect(fromDbTime(ti.end_date!), ti.task_id).toBeGreaterThanOrEqual(target);
      // pokeInterval is 30 s, yet each is done within a few seconds of its moment: the next poke (or the trigger) is at the moment.
      expect(fromDbTime(ti.end_date!) - target, ti.task_id).toBeLessThan(5_000);
    }
  }, 60_000);

  it('HttpSensor in every mode waits for a local server to answer with the JSON field asked for, its token from a named connection that no row stores', async () => {
    let ready = false;
    const server = http.createServer((request, response) => {
      if (request.headers.authorization !== 'Bearer s3cret-token') return void response.writeHead(401).end();
      response.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify({ state: ready ? 'done' : 'running' }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    process.env.DEFERFLOW_CONN_JOBS = `${base}/?__extra__=${encodeURIComponent(JSON.stringify({ Authorization: 'Bearer s3cret-token' }))}`;
    try {
      const url = `${base}/job`;
      const proj = project(`http-${dialect}`, {});
      writeFileSync(
        path.join(proj.dir, 'dags', 'http.mjs'),
        `import { Dag } from ${entry};\nimport { HttpSensor } from ${JSON.stringify(PACKAGE_TRIGGERS)};\n` +
          `export const dag = new Dag({ dagId: 'http' }).add(...['poke', 'reschedule', 'deferrable'].map((mode) => ` +
          `new HttpSensor({ taskId: mode, mode, connection: 'jobs', url: '/job', jsonPath: 'state', jsonEquals: 'done', pokeInterval: 0.2 })));\n`,
      );
      const { app } = await start(proj);
      const runId = await app.triggerDagRun('http');
      await waitFor(async () => (await states(app, 'http', runId)).deferrable === 'deferred', { what: 'the deferrable sensor deferred' });
      const [row] = await app.database.db.selectFrom('trigger').select(['classpath', 'kwargs']).execute();
      expect(row!.classpath).toBe('deferflow.triggers.HttpTrigger');
      expect(parsePlain(row!.kwargs)).toMatchObject({ connection: 'jobs', url: '/job' });
      expect(row!.kwargs).not.toContain('s3cret');
      ready = true;
      expect(await app.waitForDagRun('http', runId)).toBe('success');
      const rows = await app.database.db.selectFrom('task_instance').select(['task_id', 'return_value']).where('run_id', '=', runId).execute();
      expect(Object.fromEntries(rows.map((ti) => [ti.task_id, JSON.parse(ti.return_value!)]))).toEqual({
        poke: { url, status: 200 },
        reschedule: { url, status: 200 },
        deferrable: { url, status: 200 },
      });
    } finally {
      delete process.env.DEFERFLOW_CONN_JOBS;
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 60_000);

  it('sensors sharing one consolidated wait keep their own timeout and softFail; one cleared or joining late does not disturb the others', async () => {
    const proj = project(`shared-${dialect}`, {
      shared: [
        { taskId: 'patient', flag: 'one.flag', options: { mode: 'deferrable', pokeInterval: 0.2, timeout: 3600 } },
        { taskId: 'hasty', flag: 'one.flag', options: { mode: 'deferrable', pokeInterval: 0.2, timeout: 1, softFail: true } },
        { taskId: 'strict', flag: 'one.flag', options: { mode: 'deferrable', pokeInterval: 0.2, timeout: 1 } },
        { taskId: 'cleared', flag: 'one.flag', options: { mode: 'deferrable', pokeInterval: 0.2, timeout: 3600 } },
      ],
      late: [{ taskId: 'latecomer', flag: 'one.flag', options: { mode: 'deferrable', pokeInterval: 0.2, timeout: 3600 } }],
    });
    const { app, url } = await start(proj);
    const runId = await app.triggerDagRun('shared');
    await waitFor(async () => (await states(app, 'shared', runId)).cleared === 'deferred' && (await states(app, 'shared', runId)).patient === 'deferred', {
      what: 'the sensors deferred',
    });
    const rows = await app.database.db.selectFrom('trigger').select('id').execute();
    expect(rows).toHaveLength(1);
    // One is cleared while the others wait on the same row.
    const cleared = spawnDeferflow(['tasks', 'clear', '--db', url, '--run', runId, '--task', 'cleared']);
    expect((await cleared.exit).code).toBe(0);
    // The hasty and strict ones time out on their own (1 s); the row stays for the others.
    await waitFor(
      async () => {
        const now = await states(app, 'shared', runId);
        return now.hasty === 'skipped' && now.strict === 'failed';
      },
      { what: 'the two short timeouts' },
    );
    expect((await states(app, 'shared', runId)).patient).toBe('deferred');
    expect(await app.database.db.selectFrom('trigger').select('id').execute()).toEqual(rows);
    // A sensor of another run joins the same wait late.
    const lateRun = await app.triggerDagRun('late');
    await waitFor(async () => (await states(app, 'late', lateRun)).latecomer === 'deferred', { what: 'the latecomer deferred' });
    expect(await app.database.db.selectFrom('trigger').select('id').execute()).toEqual(rows);
    proj.raise('one.flag', 'here');
    expect(await app.waitForDagRun('late', lateRun)).toBe('success');
    // The run ends either way: its leaf `after` (all_success) is skipped or upstream_failed,
    // whichever of hasty's skip and strict's failure the scheduler saw first, as in Airflow.
    await app.waitForDagRun('shared', runId);
    const final = await states(app, 'shared', runId);
    expect([final.patient, final.hasty, final.strict, final.cleared]).toEqual(['success', 'skipped', 'failed', 'success']);
  }, 60_000);

  it('SqlSensor in every mode waits for a query on a named connection to return a truthy first cell; the trigger row names the connection, never its URL', async () => {
    const targetUrl = await freshDatabaseUrl(dialect);
    const target = openDatabase(targetUrl);
    await sql`create table ready (n integer)`.execute(target.db);
    process.env.DEFERFLOW_CONN_TARGET = targetUrl;
    try {
      const proj = project(`sql-${dialect}`, {});
      writeFileSync(
        path.join(proj.dir, 'dags', 'sql.mjs'),
        `import { Dag } from ${entry};\nimport { SqlSensor } from ${JSON.stringify(PACKAGE_TRIGGERS)};\n` +
          `export const dag = new Dag({ dagId: 'sql' }).add(...['poke', 'reschedule', 'deferrable'].map((mode) => ` +
          `new SqlSensor({ taskId: mode, mode, connection: 'target', sql: 'select count(*) from ready', pokeInterval: 0.2 })));\n`,
      );
      const { app } = await start(proj);
      const runId = await app.triggerDagRun('sql');
      await waitFor(async () => (await states(app, 'sql', runId)).deferrable === 'deferred', { what: 'the deferrable sensor deferred' });
      const [row] = await app.database.db.selectFrom('trigger').select(['classpath', 'kwargs']).execute();
      expect(row!.classpath).toBe('deferflow.triggers.SqlTrigger');
      expect(parsePlain(row!.kwargs)).toMatchObject({ connection: 'target', sql: 'select count(*) from ready' });
      expect(row!.kwargs).not.toContain(targetUrl);
      await sql`insert into ready (n) values (1)`.execute(target.db);
      expect(await app.waitForDagRun('sql', runId)).toBe('success');
      const rows = await app.database.db.selectFrom('task_instance').select(['task_id', 'return_value']).where('run_id', '=', runId).execute();
      // count(*) is a number on SQLite, a bigint (as text) on PostgreSQL.
      for (const ti of rows) expect([ti.task_id, String(JSON.parse(ti.return_value!).value)]).toEqual([ti.task_id, '1']);
    } finally {
      delete process.env.DEFERFLOW_CONN_TARGET;
      await target.close();
    }
  }, 60_000);

  it('a sensor naming a connection the environment does not define fails its try, naming the variable to set', async () => {
    const proj = project(`no-connection-${dialect}`, {});
    writeFileSync(
      path.join(proj.dir, 'dags', 'nowhere.mjs'),
      `import { Dag } from ${entry};\nimport { SqlSensor } from ${JSON.stringify(PACKAGE_TRIGGERS)};\n` +
        `export const dag = new Dag({ dagId: 'nowhere' }).add(new SqlSensor({ taskId: 'wait', mode: 'deferrable', connection: 'nowhere', sql: 'select 1' }));\n`,
    );
    const { app, logs } = await start(proj);
    const runId = await app.triggerDagRun('nowhere');
    expect(await app.waitForDagRun('nowhere', runId)).toBe('failed');
    const failure = await logs.waitForLines((line) => line.code === 'DF_UNKNOWN_CONNECTION', { what: 'the unknown connection logged' });
    expect(String(failure[0]!.error)).toContain('no connection "nowhere": set DEFERFLOW_CONN_NOWHERE to its URL');
  }, 60_000);

  it('a poke that throws fails the try, counts as "not yet" with silentFail, and skips with softFail', async () => {
    const proj = project(`throwing-${dialect}`, {
      loud: [{ taskId: 'wait', flag: 'loud.flag', options: { mode: 'poke', pokeInterval: 0.1 } }],
      silent: [{ taskId: 'wait', flag: 'silent.flag', options: { mode: 'reschedule', pokeInterval: 0.1, silentFail: true } }],
      soft: [{ taskId: 'wait', flag: 'soft.flag', options: { mode: 'poke', pokeInterval: 0.1, softFail: true } }],
    });
    for (const name of ['loud', 'silent', 'soft']) writeFileSync(proj.flag(`${name}.flag.broken`), '');
    const { app, logs } = await start(proj);
    const [loud, silent, soft] = [await app.triggerDagRun('loud'), await app.triggerDagRun('silent'), await app.triggerDagRun('soft')];
    expect(await app.waitForDagRun('loud', loud)).toBe('failed');
    expect(await app.waitForDagRun('soft', soft)).toBe('success');
    expect(await states(app, 'soft', soft)).toEqual({ wait: 'skipped', after: 'skipped' });
    await waitFor(() => proj.pokes('silent.flag').worker >= 3, { what: 'the silent sensor poking on' });
    expect((await row(app, 'silent', silent, 'wait')).state).not.toBe('failed');
    // A poke's line is logged after the poke counted it.
    await logs.waitForLines((line) => line.dag_id === 'silent' && String(line.msg).includes('poke failed: flag unreadable; silentFail'), {
      atLeast: 3,
      what: 'three silenced pokes logged',
    });
    rmSync(proj.flag('silent.flag.broken'));
    proj.raise('silent.flag', 'fine now');
    expect(await app.waitForDagRun('silent', silent)).toBe('success');
  }, 60_000);

  it('exponentialBackoff doubles the pause between pokes up to maxWait, on the worker and in the consolidated wait on the triggerer', async () => {
    const proj = project(`backoff-${dialect}`, {
      backoff: [{ taskId: 'wait', flag: 'b.flag', options: { mode: 'reschedule', pokeInterval: 0.1, exponentialBackoff: true, maxWait: 0.5 } }],
      backoff_deferred: [{ taskId: 'wait', flag: 'd.flag', options: { mode: 'deferrable', pokeInterval: 0.1, exponentialBackoff: true, maxWait: 0.4 } }],
    });
    const { app } = await start(proj);
    const runId = await app.triggerDagRun('backoff');
    const deferredRunId = await app.triggerDagRun('backoff_deferred');
    await waitFor(() => proj.pokes('b.flag').worker >= 6 && proj.pokes('d.flag').triggerer >= 5, {
      what: 'six pokes on the worker, five on the triggerer',
      timeoutMs: 20_000,
    });
    // The consolidated wait carries the backoff in its kwargs.
    const triggerRows = await app.database.db.selectFrom('trigger').select('kwargs').execute();
    expect(triggerRows.map((row) => parsePlain(row.kwargs))).toEqual([expect.objectContaining({ exponentialBackoff: true, maxWait: 0.4 })]);
    proj.raise('b.flag', 'x');
    proj.raise('d.flag', 'x');
    expect(await app.waitForDagRun('backoff', runId)).toBe('success');
    expect(await app.waitForDagRun('backoff_deferred', deferredRunId)).toBe('success');
    // Sleeps never end early: each pause on the triggerer is at least the doubled interval (capped at maxWait).
    const times = proj.pokes('d.flag').triggererTimes;
    const gaps = times.slice(1, 5).map((t, i) => t - times[i]!);
    expect(gaps.map((gap, i) => gap >= [100, 200, 400, 400][i]! - 1)).toEqual([true, true, true, true]);
    const rows = await app.database.db.selectFrom('task_reschedule').select(['start_date', 'end_date', 'reschedule_date']).orderBy('id').execute();
    // The pause runs from the poke's end, which lies between the run's start and end: so it is at
    // most reschedule - start and at least reschedule - end, whatever the machine's load.
    const expected = [100, 200, 400, 500, 500];
    const outside = rows.slice(0, 5).flatMap((r, i) => {
      const [start, end, again] = [fromDbTime(r.start_date), fromDbTime(r.end_date), fromDbTime(r.reschedule_date)];
      return again - end <= expected[i]! + 1 && again - start >= expected[i]! - 1
        ? []
        : [`pause ${i}: ${again - end}..${again - start} ms, expected ${expected[i]}`];
    });
    expect(outside).toEqual([]);
  }, 60_000);

  it('deferrable sensors waiting on the same flag share one trigger row and one poke per interval; --smart-sensors consolidates an unchanged DAG of poke-mode sensors', async () => {
    const shared = Array.from({ length: 150 }, (_, i) => ({ taskId: `w${i}`, flag: 'shared.flag', options: { mode: 'deferrable', pokeInterval: 0.5 } }));
    // Poke mode as written; the deployment switch alone makes them wait on the triggerer.
    const switched = [
      ...Array.from({ length: 3 }, (_, i) => ({ taskId: `a${i}`, flag: 'a.flag', options: { mode: 'poke', pokeInterval: 0.2 } })),
      ...Array.from({ length: 2 }, (_, i) => ({ taskId: `b${i}`, flag: 'b.flag', options: { mode: 'poke', pokeInterval: 0.2 } })),
    ];
    const proj = project(`consolidated-${dialect}`, { shared, switched });
    const { app } = await start(proj, { concurrency: 16, smartSensors: ['FlagSensor'] });
    const sharedRun = await app.triggerDagRun('shared');
    const switchedRun = await app.triggerDagRun('switched');
    const deferredCount = async (dagId: string, runId: string) =>
      Number(
        (
          await app.database.db
            .selectFrom('task_instance')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('dag_id', '=', dagId)
            .where('run_id', '=', runId)
            .where('state', '=', 'deferred')
            .executeTakeFirstOrThrow()
        ).n,
      );
    await waitFor(async () => (await deferredCount('shared', sharedRun)) === 150 && (await deferredCount('switched', switchedRun)) === 5, {
      what: 'every sensor deferred',
      timeoutMs: 60_000,
    });
    const triggers = await app.database.db.selectFrom('trigger').select(['classpath', 'kwargs']).execute();
    const flags = triggers.map((t) => parsePlain(t.kwargs).pokeContext.flag as string).sort();
    expect(flags).toEqual([proj.flag('a.flag'), proj.flag('b.flag'), proj.flag('shared.flag')].sort());
    expect(new Set(triggers.map((t) => t.classpath))).toEqual(new Set(['deferflow.SensorPokeTrigger']));
    // No slot held while they wait.
    expect(app.worker!.runningCount).toBe(0);
    // One poke per interval on the triggerer, however many wait: over ~2 s at 0.5 s, a handful.
    const before = proj.pokes('shared.flag').triggerer;
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const during = proj.pokes('shared.flag').triggerer - before;
    expect(during).toBeGreaterThanOrEqual(2);
    expect(during).toBeLessThanOrEqual(6);
    for (const flag of ['shared.flag', 'a.flag', 'b.flag']) proj.raise(flag, flag);
    expect(await app.waitForDagRun('shared', sharedRun)).toBe('success');
    expect(await app.waitForDagRun('switched', switchedRun)).toBe('success');
    const values = await app.database.db
      .selectFrom('task_instance')
      .select(['task_id', 'return_value'])
      .where('dag_id', '=', 'switched')
      .where('run_id', '=', switchedRun)
      .execute();
    expect(Object.fromEntries(values.map((v) => [v.task_id, JSON.parse(v.return_value!)]))).toEqual({
      a0: 'a.flag',
      a1: 'a.flag',
      a2: 'a.flag',
      b0: 'b.flag',
      b1: 'b.flag',
      after: 'after ran',
    });
  }, 120_000);
});

describe('deferflow standalone --smart-sensors', () => {
  it('runs an unchanged DAG of poke-mode sensors consolidated on the triggerer (a real process, the flag as a user gives it)', async () => {
    const proj = project('smart-cli', {
      unchanged: Array.from({ length: 4 }, (_, i) => ({ taskId: `w${i}`, flag: 'cli.flag', options: { mode: 'poke', pokeInterval: 0.2 } })),
    });
    const db = await scratch.database('sqlite');
    const standalone = spawnDeferflow(
      [
        'standalone',
        '--db',
        db.url,
        '--dags',
        './dags',
        '--trigger-module',
        './sensors.mjs',
        '--smart-sensors',
        'FlagSensor',
        '--trigger-dag',
        'unchanged',
        '--exit-when-done',
      ],
      {},
      proj.dir,
    );
    // While they wait: one consolidated trigger row, every sensor deferred (none holds a slot).
    await waitFor(
      async () => {
        const deferred = await db.db.selectFrom('task_instance').select('task_id').where('state', '=', 'deferred').execute();
        return deferred.length === 4;
      },
      { what: 'the four sensors deferred', timeoutMs: 30_000 },
    );
    const triggers = await db.db.selectFrom('trigger').select('classpath').execute();
    expect(triggers).toEqual([{ classpath: 'deferflow.SensorPokeTrigger' }]);
    proj.raise('cli.flag', 'go');
    const exit = await standalone.exit;
    expect(exit.code, `${standalone.text.join('\n')}\n${standalone.stderr.join('\n')}`).toBe(0);
    expect(standalone.text.join('\n')).toMatch(/unchanged manual__\S+: success in /);
    expect(proj.pokes('cli.flag').triggerer).toBeGreaterThan(0);
  }, 60_000);
});

describe('sensor options', () => {
  it('backoffPause doubles the interval after each empty poke, capped at maxWait', () => {
    expect([1, 2, 3, 4, 5].map((pokes) => backoffPause(100, pokes, null))).toEqual([100, 200, 400, 800, 1600]);
    expect([1, 2, 3, 4, 5].map((pokes) => backoffPause(100, pokes, 400))).toEqual([100, 200, 400, 400, 400]);
    expect(Number.isFinite(backoffPause(100, 10_000, null))).toBe(true);
  });

  it('are refused when the DAG file loads, naming the sensor class and the field', async () => {
    const proj = project('bad-options', {
      sideways: [{ taskId: 'wait', flag: 'x.flag', options: { mode: 'sideways' } }],
      negative: [{ taskId: 'wait', flag: 'x.flag', options: { pokeInterval: -5 } }],
    });
    writeFileSync(
      path.join(proj.dir, 'dags', 'plain.mjs'),
      `import { Dag } from ${entry};\nimport { PlainSensor } from '../sensors.mjs';\nexport const dag = new Dag({ dagId: 'plain' }).add(new PlainSensor({ taskId: 'wait', mode: 'deferrable' }));\n`,
    );
    const db = await scratch.database('sqlite');
    const reserialize = spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', path.join(proj.dir, 'dags')]);
    expect((await reserialize.exit).code).toBe(1);
    const printed = reserialize.text.join('\n');
    expect(printed).toContain('FlagSensor: mode: expected one of poke, reschedule, deferrable, got "sideways"');
    expect(printed).toContain('FlagSensor: pokeInterval: expected a luxon Duration or a number of seconds >= 0, got -5');
    expect(printed).toContain('PlainSensor: mode deferrable needs a trigger of its own (override trigger()) or static pokeContextFields');
    const imported = await db.db.selectFrom('serialized_dag').select('dag_id').execute();
    expect(imported).toEqual([]);
  }, 60_000);
});
