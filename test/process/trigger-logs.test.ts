// Trigger logs as a user reads them: `deferflow tasks logs` shows what the trigger a task waits
// on logged, while the task is still deferred and after, interleaved with the worker's lines;
// a trigger shared by two tasks stores its lines once; secret kwargs and connection passwords
// are masked in the stored logs and in the processes' own logs.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const TOKEN = 'tok-5ecret-9b1d';
const CONNECTION_PASSWORD = 'c0nn-pa55-77aa';
const CONNECTION = `postgres://loader:${CONNECTION_PASSWORD}@warehouse.internal:5432/dw`;

/** A trigger module in the user's folder: logs while it waits for a file, its token declared secret. */
const triggerModule = `
import { existsSync } from 'node:fs';
import { BaseTrigger, TriggerEvent } from ${JSON.stringify(PACKAGE_ENTRY)};
export class WatchTrigger extends BaseTrigger {
  static classpath = 'mine.WatchTrigger';
  static secretKwargs = ['token'];
  constructor(kwargs) { super(); this.kwargs = kwargs; }
  serialize() { return { classpath: WatchTrigger.classpath, kwargs: this.kwargs }; }
  async *run() {
    this.log.info({ token: this.kwargs.token }, 'watching ' + this.kwargs.file + ' with token ' + this.kwargs.token);
    this.log.info('warehouse at ' + process.env.DEFERFLOW_CONN_WAREHOUSE);
    while (!existsSync(this.kwargs.file)) await this.sleep(50);
    this.log.warn({ file: this.kwargs.file }, 'found it');
    yield new TriggerEvent('found');
  }
}
`;

const dagSource = (file: string) => `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { WatchTrigger } from './watch-trigger.mjs';
class Watch extends BaseOperator {
  execute(context) {
    context.log.info('connecting to ' + process.env.DEFERFLOW_CONN_WAREHOUSE);
    return this.defer({ trigger: new WatchTrigger({ file: ${JSON.stringify(file)}, token: ${JSON.stringify(TOKEN)} }), method: 'seen' });
  }
  seen(context, event) { context.log.info('resumed with ' + event); return event; }
}
export const dag = new Dag({ dagId: 'watching' }).add(new Watch({ taskId: 'first' }), new Watch({ taskId: 'second' }));
`;

async function logsOf(db: string, runId: string, task: string, json = false): Promise<string[]> {
  const proc = spawnDeferflow(['tasks', 'logs', '--db', db, '--run', runId, '--task', task, ...(json ? ['--json'] : [])]);
  const exit = await proc.exit;
  if (exit.code !== 0) throw new Error(`tasks logs exited ${exit.code}: ${proc.stderr.join('\n')}`);
  return proc.text;
}

describe.each(testDialects)('trigger logs on %s', (dialect) => {
  it('shows what the trigger logged while the task is deferred and after, once for a shared trigger, with secrets masked', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('trigger-logs');
    const file = path.join(dags, 'arrived.flag');
    writeFileSync(path.join(dags, 'watch-trigger.mjs'), triggerModule);
    writeFileSync(path.join(dags, 'watching.mjs'), dagSource(file));
    await processDagFolder(db, dags);
    const env = { DEFERFLOW_CONN_WAREHOUSE: CONNECTION };
    const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];
    const processes: TriggererProcess[] = [
      spawnDeferflow(['scheduler', '--db', db.url, ...fast], env),
      spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...fast], env),
      spawnTriggerer(['--db', db.url, '--trigger-module', path.join(dags, 'watch-trigger.mjs'), ...fast], env),
    ];
    const runId = await triggerDagRun(db, 'watching');

    // Both tasks wait on one trigger; its lines are readable from either while they wait.
    const whileDeferred = await waitFor(
      async () => {
        const states = await db.db.selectFrom('task_instance').select('state').where('run_id', '=', runId).execute();
        if (!states.every((ti) => ti.state === 'deferred')) return null;
        const lines = await logsOf(db.url, runId, 'first');
        return lines.some((line) => line.includes('warehouse at')) ? lines : null;
      },
      { what: 'the trigger lines of a deferred task', timeoutMs: 20_000 },
    );
    const trigger = await db.db.selectFrom('trigger').select('id').executeTakeFirstOrThrow();
    expect(whileDeferred.join('\n')).toContain(`[trigger ${trigger.id}] watching ${file} with token ***`);
    expect(whileDeferred.join('\n')).toContain(`[trigger ${trigger.id}] warehouse at postgres://loader:***@warehouse.internal:5432/dw`);
    expect(whileDeferred.join('\n')).toContain('connecting to postgres://loader:***@warehouse.internal:5432/dw');
    expect((await logsOf(db.url, runId, 'second')).join('\n')).toContain(`[trigger ${trigger.id}] watching ${file} with token ***`);
    const stored = await db.db.selectFrom('trigger_log').select(['trigger_id', 'message']).where('message', 'like', 'watching%').execute();
    expect(stored).toEqual([{ trigger_id: trigger.id, message: `watching ${file} with token ***` }]);

    writeFileSync(file, '');
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state === 'success', {
      what: 'the run done',
      timeoutMs: 20_000,
    });
    // After: the whole try in time order, the wait's lines between the deferral and the resume
    // (for the task whose deferral made the trigger: the other joined it, maybe after it began).
    const waits = await db.db
      .selectFrom('trigger_wait')
      .innerJoin('task_instance', 'task_instance.id', 'trigger_wait.task_instance_id')
      .select('task_instance.task_id')
      .orderBy('trigger_wait.waited_from')
      .orderBy('trigger_wait.task_instance_id')
      .execute();
    const earlier = waits[0]!.task_id;
    const after = await waitFor(
      async () => {
        const lines = await logsOf(db.url, runId, earlier);
        return lines.some((line) => line.includes('found it')) ? lines : null;
      },
      { what: "the trigger's last line stored" },
    );
    const position = (text: string) => after.findIndex((line) => line.includes(text));
    // (The trigger may start before the worker logs that it deferred: pushes are that quick.)
    const order = ['connecting to', 'with token', 'found it', 'resuming at seen', 'resumed with found', 'success'].map(position);
    expect(order.every((at) => at >= 0)).toBe(true);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(position('deferred; resumes at seen')).toBeGreaterThan(position('connecting to'));
    expect(position('deferred; resumes at seen')).toBeLessThan(position('found it'));
    const json = (await logsOf(db.url, runId, 'first', true)).map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(json.find((line) => line.msg === 'found it')).toMatchObject({ level: 'warn', trigger_id: trigger.id, file });
    expect(json.find((line) => String(line.msg).includes('with token'))).toMatchObject({ trigger_id: trigger.id, token: '***' });

    // The secrets reach no log: not the stored ones, not the processes' own.
    await stopCleanly(processes);
    const everything = [
      ...processes.flatMap((proc) => [...proc.text, ...proc.stderr]),
      ...(await db.db.selectFrom('trigger_log').select(['message', 'fields']).execute()).map((row) => `${row.message} ${JSON.stringify(row.fields)}`),
      ...(await db.db.selectFrom('task_log').select(['message', 'fields']).execute()).map((row) => `${row.message} ${JSON.stringify(row.fields)}`),
    ].join('\n');
    expect(everything).toContain('with token ***');
    expect(everything).not.toContain(TOKEN);
    expect(everything).not.toContain(CONNECTION_PASSWORD);
  });
});
