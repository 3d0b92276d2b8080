// ExternalTaskSensor end to end on both dialects: a second DAG's runs are the real target, with
// worker, scheduler and triggerer running embedded as a user runs them; and the batched,
// read-only DAG-run reads underneath it.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { deferflow, type Deferflow } from '../../../src/index.ts';
import { DagRunStateBatcher } from '../../../src/model/dag-run-state-batcher.ts';
import { openStores } from '../../../src/storage/index.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects, type TestDialect } from '../../support/databases.ts';
import { LogCapture, migratedDatabase, parsePlain, waitFor } from '../../support/fixtures.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const entry = JSON.stringify(PACKAGE_ENTRY);
const builtins = JSON.stringify(PACKAGE_TRIGGERS);

const AT = '2026-03-01T10:00:00.000Z';
const HOUR_BEFORE = '2026-03-01T09:00:00.000Z';

/** A project with a `producer` DAG (waits for a flag file, then succeeds) and DAGs of its own. */
function project(name: string, dags: Record<string, string>): { dir: string; flag: string } {
  const dir = scratch.dir(name);
  mkdirSync(path.join(dir, 'dags'));
  const flag = path.join(dir, 'produced.flag');
  writeFileSync(
    path.join(dir, 'dags', 'producer.mjs'),
    `import { Dag, FunctionOperator } from ${entry};\nimport { FileSensor } from ${builtins};\n` +
      `const dag = new Dag({ dagId: 'producer' });\n` +
      `const produce = new FileSensor({ taskId: 'produce', filepath: ${JSON.stringify(flag)}, mode: 'reschedule', pokeInterval: 0.2 });\n` +
      `const report = new FunctionOperator({ taskId: 'report', fn: () => 'reported' });\n` +
      `dag.add(produce, report);\nproduce.before(report);\nexport { dag };\n`,
  );
  for (const [dagId, source] of Object.entries(dags)) writeFileSync(path.join(dir, 'dags', `${dagId}.mjs`), source);
  return { dir, flag };
}

describe.each(testDialects)('ExternalTaskSensor on %s', (dialect: TestDialect) => {
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
  });

  async function start(dir: string): Promise<{ app: Deferflow; logs: LogCapture }> {
    const logs = new LogCapture();
    app = await deferflow({
      databaseUrl: await freshDatabaseUrl(dialect),
      dagsFolder: path.join(dir, 'dags'),
      worker: { concurrency: 4, pollInterval: 0.1, shutdownGrace: 0, taskIsolation: 'none' },
      scheduler: { pollInterval: 0.1 },
      triggerer: { pollInterval: 0.1 },
      logger: pino({ level: 'info' }, logs),
    });
    return { app, logs };
  }

  const states = async (running: Deferflow, dagId: string, runId: string) =>
    Object.fromEntries(
      (
        await running.database.db.selectFrom('task_instance').select(['task_id', 'state']).where('dag_id', '=', dagId).where('run_id', '=', runId).execute()
      ).map((row) => [row.task_id, row.state]),
    );

  it('waits in every mode for another DAG’s task or whole run at the same logical date, a delta before it, or a named function of it', async () => {
    const { dir, flag } = project(`external-${dialect}`, {
      consumer: `import { Dag } from ${entry};\nimport { ExternalTaskSensor } from ${builtins};
ExternalTaskSensor.registerLogicalDateFn('previousHour', (date) => date.minus({ hours: 1 }));
const on = { externalDagId: 'producer', pokeInterval: 0.2 };
export const dag = new Dag({ dagId: 'consumer' }).add(
  new ExternalTaskSensor({ taskId: 'poked', ...on, externalTaskId: 'produce', mode: 'poke' }),
  new ExternalTaskSensor({ taskId: 'rescheduled', ...on, externalTaskId: 'produce', mode: 'reschedule' }),
  new ExternalTaskSensor({ taskId: 'deferred', ...on, externalTaskIds: ['produce', 'report'], mode: 'deferrable' }),
  new ExternalTaskSensor({ taskId: 'whole_run', ...on, mode: 'deferrable' }),
  new ExternalTaskSensor({ taskId: 'by_delta', ...on, externalTaskId: 'produce', logicalDateDelta: 3600, mode: 'deferrable' }),
  new ExternalTaskSensor({ taskId: 'by_fn', ...on, externalTaskId: 'produce', logicalDateFn: 'previousHour', mode: 'deferrable' }),
);\n`,
    });
    const { app } = await start(dir);
    const consumer = await app.triggerDagRun('consumer', { logicalDate: AT });
    await waitFor(async () => Object.values(await states(app, 'consumer', consumer)).filter((state) => state === 'deferred').length === 4, {
      what: 'the four deferrable sensors deferred',
    });
    // No producer run yet: every sensor waits, whatever its mode.
    expect(await states(app, 'consumer', consumer)).toMatchObject({ deferred: 'deferred', whole_run: 'deferred', by_delta: 'deferred', by_fn: 'deferred' });
    const triggers = await app.database.db.selectFrom('trigger').select(['classpath', 'kwargs']).execute();
    expect(triggers.every((row) => row.classpath === 'deferflow.triggers.TaskStateTrigger')).toBe(true);
    // by_delta and by_fn watch the same run the same way: one row between them.
    const watched = triggers.map((row) => parsePlain(row.kwargs)).map(({ dagId, taskIds, logicalDates }) => JSON.stringify({ dagId, taskIds, logicalDates }));
    expect(watched.sort()).toEqual(
      [
        { dagId: 'producer', taskIds: null, logicalDates: [AT] },
        { dagId: 'producer', taskIds: ['produce'], logicalDates: [HOUR_BEFORE] },
        { dagId: 'producer', taskIds: ['produce', 'report'], logicalDates: [AT] },
      ]
        .map((kwargs) => JSON.stringify(kwargs))
        .sort(),
    );

    const sameDate = await app.triggerDagRun('producer', { logicalDate: AT });
    const hourBefore = await app.triggerDagRun('producer', { logicalDate: '2026-03-01T10:00:00+01:00' });
    // The producer runs exist but are not done: still waiting.
    await waitFor(async () => (await states(app, 'producer', sameDate)).produce === 'up_for_reschedule', { what: 'the producer waiting for its flag' });
    expect(await app.dagRunState('consumer', consumer)).toBe('running');
    writeFileSync(flag, 'done');
    expect(await app.waitForDagRun('producer', sameDate)).toBe('success');
    expect(await app.waitForDagRun('producer', hourBefore)).toBe('success');
    expect(await app.waitForDagRun('consumer', consumer)).toBe('success');
    const returned = await app.database.db
      .selectFrom('task_instance')
      .select(['task_id', 'return_value'])
      .where('dag_id', '=', 'consumer')
      .where('run_id', '=', consumer)
      .execute();
    const value = (taskId: string) => JSON.parse(returned.find((row) => row.task_id === taskId)!.return_value!);
    expect(value('deferred')).toMatchObject({ outcome: 'success', states: { [`${AT} produce`]: 'success', [`${AT} report`]: 'success' } });
    expect(value('whole_run')).toMatchObject({ outcome: 'success', states: { [AT]: 'success' } });
    expect(value('by_fn')).toMatchObject({ outcome: 'success', logicalDates: [HOUR_BEFORE] });
    expect(value('poked')).toMatchObject({ outcome: 'success', logicalDates: [AT] });
  }, 90_000);

  it('fails fast when the watched task fails (no retry, DF_EXTERNAL_TASK_FAILED), skips with softFail, and fails a run that lacks the task named', async () => {
    const { dir } = project(`external-failed-${dialect}`, {
      breaking: `import { Dag, FunctionOperator } from ${entry};
export const dag = new Dag({ dagId: 'breaking' }).add(new FunctionOperator({ taskId: 'build', fn: () => { throw new Error('build broke'); } }));\n`,
      watcher: `import { Dag } from ${entry};\nimport { ExternalTaskSensor } from ${builtins};
const on = { externalDagId: 'breaking', pokeInterval: 0.2, timeout: 600, retries: 2 };
export const dag = new Dag({ dagId: 'watcher' }).add(
  new ExternalTaskSensor({ taskId: 'deferred', ...on, externalTaskId: 'build', mode: 'deferrable' }),
  new ExternalTaskSensor({ taskId: 'soft', ...on, externalTaskId: 'build', mode: 'reschedule', softFail: true }),
  new ExternalTaskSensor({ taskId: 'silent', ...on, externalTaskId: 'build', mode: 'poke', silentFail: true }),
  new ExternalTaskSensor({ taskId: 'misnamed', ...on, externalTaskId: 'biuld', mode: 'deferrable' }),
);\n`,
    });
    const { app, logs } = await start(dir);
    const watcher = await app.triggerDagRun('watcher', { logicalDate: AT });
    await waitFor(async () => (await states(app, 'watcher', watcher)).deferred === 'deferred', { what: 'the deferrable sensor deferred' });
    const startedAt = Date.now();
    const breaking = await app.triggerDagRun('breaking', { logicalDate: AT });
    expect(await app.waitForDagRun('breaking', breaking)).toBe('failed');
    expect(await app.waitForDagRun('watcher', watcher)).toBe('failed');
    // Fast: far inside the 600 s timeout, and without spending the two retries.
    expect(Date.now() - startedAt).toBeLessThan(60_000);
    expect(await states(app, 'watcher', watcher)).toEqual({ deferred: 'failed', soft: 'skipped', silent: 'failed', misnamed: 'failed' });
    const tries = await app.database.db
      .selectFrom('task_instance')
      .select(['task_id', 'try_number'])
      .where('dag_id', '=', 'watcher')
      .where('run_id', '=', watcher)
      .execute();
    expect(tries.filter((ti) => ti.task_id !== 'soft').map((ti) => ti.try_number)).toEqual([1, 1, 1]);
    // The worker logs a try's end once it is recorded: the line can come just after the row is seen.
    const failures = await waitFor(
      () => {
        const texts = logs.matching((line) => line.code === 'DF_EXTERNAL_TASK_FAILED').map((line) => String(line.error ?? line.msg));
        return texts.some((text) => text.includes('task breaking.build of the run at 2026-03-01T10:00:00.000Z is failed')) ? texts : null;
      },
      { what: 'the failed external task logged' },
    );
    expect(failures.some((text) => text.includes(`DAG run ${breaking} of breaking has no task "biuld"`))).toBe(true);
  }, 90_000);

  it('answers many readers with few queries: reads gathered into rounds at most a second apart, identical runs asked once', async () => {
    const database = await migratedDatabase(dialect);
    try {
      const storage = openStores(database);
      const dag = {
        dagId: 'target',
        hash: 'h',
        tasks: ['a', 'b'].map((taskId) => ({ taskId, operator: 'X', retry: { retries: 0 }, priorityWeight: 1, signalActions: [] })),
      };
      for (let hour = 0; hour < 300; hour++) {
        await storage.dagRuns.createDagRun(
          dag as never,
          { runId: `r${hour}`, runType: 'manual', logicalDate: Date.UTC(2026, 0, 1, hour), conf: {} },
          Date.now(),
        );
      }
      const batcher = new DagRunStateBatcher((keys) => storage.dagRuns.readDagRunStates(keys), { minGapMs: 1000, runsPerQuery: 200 });
      const logicalDate = (hour: number) => new Date(Date.UTC(2026, 0, 1, hour)).toISOString();
      // 1,000 readers over 300 runs plus one missing run, in one turn of the loop.
      const firstWaveAt = Date.now();
      const answers = await Promise.all(
        Array.from({ length: 1000 }, (_, i) => batcher.read({ dagId: 'target', logicalDate: logicalDate(i % 301), taskIds: i % 2 === 0 ? ['a'] : null })),
      );
      expect(batcher.rounds).toBe(1);
      expect(batcher.queries).toBe(2); // 301 distinct runs, 200 a query
      expect(answers[0]).toEqual({ dagId: 'target', logicalDate: logicalDate(0), runId: 'r0', state: 'queued', taskStates: { a: [null] } });
      expect(answers[1]).toMatchObject({ runId: 'r1', taskStates: {} });
      expect(answers[300]).toBeNull();
      // A second wave just after the first waits out the gap from the first round's start, then shares one round.
      await Promise.all([batcher.read({ dagId: 'target', logicalDate: logicalDate(5) }), batcher.read({ dagId: 'target', logicalDate: logicalDate(6) })]);
      expect(batcher.rounds).toBe(2);
      expect(Date.now() - firstWaveAt).toBeGreaterThanOrEqual(1000);
      await expect(batcher.read({ dagId: 'target', logicalDate: '2026-01-01T00:00:00' })).rejects.toThrow(
        /logicalDate "2026-01-01T00:00:00" is not an ISO-8601 moment with an offset or Z/,
      );
    } finally {
      await database.close();
    }
  });
});
