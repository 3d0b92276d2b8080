/**
 * The task runtime as users run it: `deferflow worker`, `deferflow scheduler` and the triggerer
 * as separate processes on one PostgreSQL database, a DAG folder, and the `dags` commands.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { dropTestDatabases } from './support/databases.ts';
import { migratedDatabase, waitFor, type TestDatabase } from './support/fixtures.ts';
import { killLeftovers, REPO_ROOT, spawnDeferflow, spawnTriggerer, type TriggererProcess } from './support/processes.ts';

afterAll(dropTestDatabases);
const open: { databases: TestDatabase[]; dirs: string[] } = { databases: [], dirs: [] };
afterEach(async () => {
  await killLeftovers();
  await Promise.all(open.databases.splice(0).map((db) => db.close()));
  for (const dir of open.dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const INDEX = path.join(REPO_ROOT, 'src/index.ts');
const TRIGGERS = path.join(REPO_ROOT, 'triggers/index.ts');

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
extract.then(wait).then(load);
`;

async function finished(proc: TriggererProcess) {
  return Promise.race([proc.exit, new Promise((_, reject) => setTimeout(() => reject(new Error(`${proc.args.join(' ')} did not end\n${proc.describe()}`)), 20_000))]);
}

describe('task runtime processes on postgres', () => {
  it('a DAG with a deferring task runs worker → triggerer → worker → success; a broken DAG file is reported; all exit 0 on SIGTERM', async () => {
    const db = await migratedDatabase('postgres');
    open.databases.push(db);
    const dags = mkdtempSync(path.join(os.tmpdir(), 'deferflow-runtime-'));
    open.dirs.push(dags);
    writeFileSync(path.join(dags, 'waiting_etl.mts'), WAITING_DAG);
    writeFileSync(path.join(dags, 'broken.mts'), `import ${JSON.stringify(INDEX)};\nthrow new Error('syntax of the config is off');\n`);

    const reserialize = spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]);
    expect(await finished(reserialize)).toEqual({ code: 1, signal: null });
    expect(reserialize.text).toContain('waiting_etl\tcreated');
    expect(reserialize.text.find((line) => line.startsWith('import error'))).toContain('syntax of the config is off');

    const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '2', ...fast]);
    const triggerer = spawnTriggerer(['--db', db.url, ...fast]);
    for (const proc of [scheduler, worker, triggerer]) await proc.waitForLine((line) => typeof line.job_id === 'number', 20_000);

    const trigger = spawnDeferflow(['dags', 'trigger', 'waiting_etl', '--db', db.url, '--run-id', 'manual__e2e']);
    expect(await finished(trigger)).toEqual({ code: 0, signal: null });
    expect(trigger.text).toEqual(['manual__e2e']);

    const runState = async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'manual__e2e').executeTakeFirstOrThrow()).state;
    await waitFor(async () => (await runState()) === 'success', { what: 'the run to succeed', timeoutMs: 20_000 });
    const rows = Object.fromEntries((await db.db.selectFrom('task_instance').select(['task_id', 'state', 'return_value', 'try_number']).execute()).map((row) => [row.task_id, row]));
    expect(Object.fromEntries(Object.entries(rows).map(([id, row]) => [id, row.state]))).toEqual({ extract: 'success', wait: 'success', load: 'success' });
    expect(JSON.parse(rows.wait!.return_value!)).toEqual({ fired: true, asked: 'politely' });
    expect(rows.wait!.try_number).toBe(1);
    expect(worker.matching((line) => typeof line.msg === 'string' && line.msg.includes('deferred; resumes at resume'))).toHaveLength(1);

    for (const proc of [worker, scheduler, triggerer]) proc.kill('SIGTERM');
    for (const proc of [worker, scheduler, triggerer]) expect(await finished(proc)).toEqual({ code: 0, signal: null });
    const jobs = await db.db.selectFrom('job').select(['job_type', 'state']).orderBy('job_type').execute();
    expect(jobs).toEqual([
      { job_type: 'SchedulerJob', state: 'success' },
      { job_type: 'TriggererJob', state: 'success' },
      { job_type: 'WorkerJob', state: 'success' },
    ]);
  }, 60_000);
});
