// Task logs as a user reads them with `deferflow tasks logs`, written by an in-process worker:
// lines the database would refuse, the per-try caps, a rescheduled sensor, and the errors.
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BaseOperator, type TaskContext } from '../../src/index.ts';
import { NO_RETRIES } from '../../src/model/retry-policy.ts';
import { TASK_LOG_BYTE_CAP } from '../../src/daemons/worker/task-log-writer.ts';
import { Worker, type TaskResolver } from '../../src/daemons/worker/worker.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, LogCapture, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { spawnDeferflow } from '../support/processes.ts';

afterAll(dropTestDatabases);

type LoggingContext = TaskContext & { log: pino.Logger };

/** Logs a line PostgreSQL cannot store as it is (a NUL, lone surrogates), then an ordinary one, then fails. */
class LogsOddTextThenFails extends BaseOperator {
  execute(context: LoggingContext): never {
    context.log.info({ raw: 'a\u0000b', half: '\ud800', 'k\u0000ey': 1 }, 'nul \u0000 and half \udc00 here');
    context.log.warn('after the odd line');
    throw new Error('disk full');
  }
}

/** One line at each of debug, info and warn. */
class LogsAtEveryLevel extends BaseOperator {
  execute(context: LoggingContext): void {
    context.log.debug('debug line');
    context.log.info('info line');
    context.log.warn('warn line');
  }
}

const FLOOD_LINE_BYTES = 8 * 1024;
const FLOOD_LINES = (2 * TASK_LOG_BYTE_CAP) / FLOOD_LINE_BYTES;

/** Logs twice the byte cap, then fails. */
class FloodsThenFails extends BaseOperator {
  execute(context: LoggingContext): never {
    for (let i = 0; i < FLOOD_LINES; i++) context.log.info({ i }, 'x'.repeat(FLOOD_LINE_BYTES));
    throw new Error('gave up after the flood');
  }
}

/** A sensor in reschedule mode: pokes, then asks to run again in an hour. */
class PokesLater extends BaseOperator {
  execute(context: LoggingContext): never {
    context.log.info('poke: not there yet');
    return this.reschedule(3600);
  }
}

describe.each(testDialects)('task logs on %s', (dialect) => {
  const open: { databases: TestDatabase[]; workers: Worker[] } = { databases: [], workers: [] };
  afterEach(async () => {
    await Promise.all(open.workers.splice(0).map((worker) => worker.stop()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });

  /** Runs the task instances of `operators` (task id → operator) once each, until none is running. */
  const runTasks = async (operators: Record<string, BaseOperator>, processLevel = 'info') => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const ids: Record<string, number> = {};
    for (const taskId of Object.keys(operators)) ids[taskId] = await createTaskInstance(db, { state: 'scheduled', taskId, dagId: 'logs_dag' });
    const resolve: TaskResolver = async (claimed) => ({
      operator: operators[claimed.taskId]!,
      retry: NO_RETRIES,
      executionTimeoutMs: null,
      context: (ti, started, taskLog, signal) => ({
        taskInstance: { id: ti.id, dagId: ti.dagId, taskId: ti.taskId, runId: ti.runId, mapIndex: ti.mapIndex, tryNumber: started.tryNumber },
        log: taskLog,
        signal,
      }),
    });
    const processLog = new LogCapture();
    const worker = new Worker(
      db,
      { concurrency: 4, pollIntervalMs: 50, heartbeatIntervalMs: 500, shutdownGraceMs: 300, hostname: 'test-worker' },
      resolve,
      pino({ level: processLevel }, processLog),
    );
    open.workers.push(worker);
    await worker.start();
    const settled = ['failed', 'success', 'up_for_reschedule'];
    for (const [taskId, id] of Object.entries(ids)) {
      await waitFor(async () => settled.includes((await taskInstance(db, id)).state ?? ''), { what: `${taskId} to settle`, timeoutMs: 20_000 });
    }
    return { db, ids, processLog };
  };

  const logs = async (db: TestDatabase, ...args: string[]) => {
    const cli = spawnDeferflow(['tasks', 'logs', '--db', db.url, ...args]);
    return { exit: await cli.exit, out: cli.text, err: cli.stderr.join('\n') };
  };

  it("keeps a line the database would refuse, and a flooding task's failure after its cap line", async () => {
    const { db, ids, processLog } = await runTasks({ odd: new LogsOddTextThenFails(), flood: new FloodsThenFails() });
    expect(processLog.matching((line) => String(line.msg).includes('task log line(s) failed'))).toEqual([]);

    const odd = await logs(db, '--run', 'manual__1', '--task', 'odd', '--json');
    expect(odd.exit).toEqual({ code: 0, signal: null });
    const oddLines = odd.out.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(oddLines.map((line) => [line.level, line.msg])).toEqual([
      ['info', expect.stringMatching(/^running logs_dag\.odd .*, try 1$/)],
      ['info', 'nul \ufffd and half \ufffd here'],
      ['warn', 'after the odd line'],
      ['error', expect.stringMatching(/\) failed: Error: disk full$/)],
    ]);
    expect(oddLines[1]).toMatchObject({ raw: 'a\ufffdb', half: '\ufffd', 'k\ufffdey': 1 });

    const flood = await db.db.selectFrom('task_log').select(['level', 'message', 'fields']).where('task_instance_id', '=', ids.flood!).orderBy('id').execute();
    const storedBytes = flood.reduce((sum, line) => sum + Buffer.byteLength(line.message) + Buffer.byteLength(line.fields ?? ''), 0);
    expect(storedBytes).toBeLessThanOrEqual(TASK_LOG_BYTE_CAP + 64 * 1024);
    expect(storedBytes).toBeGreaterThan(TASK_LOG_BYTE_CAP - 64 * 1024);
    // The cap drops what the task logs; the worker's own lines about the try still follow.
    expect(flood.at(-2)).toMatchObject({ level: 'warn', message: expect.stringContaining('task log cap reached') });
    expect(flood.at(-1)).toMatchObject({ level: 'error', message: expect.stringContaining('Error: gave up after the flood') });
    // Nothing is lost for good: the process log has every line.
    expect(processLog.matching((line) => line.task_instance_id === ids.flood && typeof line.i === 'number')).toHaveLength(FLOOD_LINES);
  }, 60_000);

  it('keeps info lines whatever the process prints (standalone prints warn and up), and never debug lines', async () => {
    const { db, ids, processLog } = await runTasks({ quiet: new LogsAtEveryLevel() }, 'warn');
    const stored = await db.db.selectFrom('task_log').select(['level', 'message']).where('task_instance_id', '=', ids.quiet!).orderBy('id').execute();
    expect(stored.map((line) => [line.level, line.message])).toEqual([
      ['info', expect.stringMatching(/^running logs_dag\.quiet .*, try 1$/)],
      ['info', 'info line'],
      ['warn', 'warn line'],
      ['info', expect.stringMatching(/^logs_dag\.quiet .* success$/)],
    ]);
    // The process prints what its own level lets through, as before.
    expect(processLog.lines.map((line) => line.msg)).toEqual(['warn line']);
  });

  it("prints a rescheduled sensor's pokes, and says which of run, task or try is wrong", async () => {
    const { db, ids } = await runTasks({ sensor: new PokesLater() });
    // A reschedule gives its try back: the row says try 0 while its poke is logged as try 1.
    expect((await taskInstance(db, ids.sensor!)).try_number).toBe(0);
    const sensor = await logs(db, '--run', 'manual__1', '--task', 'sensor');
    expect(sensor.exit).toEqual({ code: 0, signal: null });
    expect(sensor.out.map((line) => line.replace(/^\S+ /, ''))).toEqual([
      expect.stringMatching(/^INFO {2}running logs_dag\.sensor .*, try 1$/),
      'INFO  poke: not there yet',
      expect.stringMatching(/^INFO {2}logs_dag\.sensor .* up_for_reschedule: runs again at /),
    ]);
    expect(sensor.out[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO {2}running/);

    const noRun = await logs(db, '--run', 'nope', '--task', 'sensor');
    expect(noRun.exit).toEqual({ code: 2, signal: null });
    expect(noRun.err).toContain('error [DF_INVALID_OPTION]: run: no task instances of run "nope"');
    const noTask = await logs(db, '--run', 'manual__1', '--task', 'nope');
    expect(noTask.exit).toEqual({ code: 2, signal: null });
    expect(noTask.err).toContain('error [DF_INVALID_OPTION]: task: run "manual__1" has no task nope (its tasks: sensor)');
    const badTry = await logs(db, '--run', 'manual__1', '--task', 'sensor', '--try', 'two');
    expect(badTry.exit).toEqual({ code: 2, signal: null });
    expect(badTry.err).toContain('try: task sensor of run "manual__1" has tries 1 to 1, not two');
  }, 60_000);
});
