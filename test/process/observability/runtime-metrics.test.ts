// The worker's and the scheduler's /metrics, scraped from real processes while a DAG runs:
// slots, task outcomes by state and operator, task durations, scheduler passes, DAG runs.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../../src/services/dags/manual-run.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer } from '../../support/processes.ts';
import { scrape } from '../../support/scrape.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/** Four independent tasks: one succeeds, one fails, one defers and resumes, one runs until the test writes its file. */
const dagSource = (releaseFile: string) => `
import { existsSync } from 'node:fs';
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Ok extends BaseOperator { execute() { return 'fine'; } }
class Boom extends BaseOperator { execute() { throw new Error('boom'); } }
class Nap extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.2 }), method: 'done' }); }
  done() { return 'rested'; }
}
class UntilReleased extends BaseOperator {
  async execute() { while (!existsSync(${JSON.stringify(releaseFile)})) await new Promise((resolve) => setTimeout(resolve, 50)); return 'released'; }
}
export const dag = new Dag({ dagId: 'metered' }).add(
  new Ok({ taskId: 'ok' }),
  new Boom({ taskId: 'boom' }),
  new Nap({ taskId: 'nap' }),
  new UntilReleased({ taskId: 'held' }),
);
`;

describe.each(testDialects)('worker and scheduler metrics on %s', (dialect) => {
  it('count outcomes by state and operator, durations, slots in use, scheduler passes and DAG runs by state', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('metered');
    const releaseFile = path.join(dags, 'release');
    writeFileSync(path.join(dags, 'metered.mjs'), dagSource(releaseFile));
    await processDagFolder(db, dags);
    const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5', '--http-port', '0'];
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '4', ...fast]);
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    spawnTriggerer(['--db', db.url, '--poll-interval', '0.1']);
    const [workerBase, schedulerBase] = [await worker.waitForHttp(), await scheduler.waitForHttp()];
    await worker.waitForJob(20_000);
    await scheduler.waitForJob(20_000);

    const idle = await scrape(workerBase);
    expect(idle.value('deferflow_executor_open_slots')).toBe(4);
    expect(idle.value('deferflow_executor_running_tasks')).toBe(0);
    expect(idle.sum('deferflow_ti_finish_total')).toBe(0);
    const schedulerBefore = await scrape(schedulerBase);
    expect(schedulerBefore.sum('deferflow_dag_runs_finished_total')).toBe(0);
    const passesBefore = schedulerBefore.value('deferflow_scheduler_loop_duration_seconds_count')!;

    const runId = await triggerDagRun(db, 'metered');
    // While `held` runs, every other task is done: one slot in use.
    const busy = await waitFor(
      async () => {
        const samples = await scrape(workerBase);
        return samples.value('deferflow_executor_running_tasks') === 1 &&
          samples.value('deferflow_ti_finish_total', { state: 'success', operator: 'Nap' }) === 1
          ? samples
          : null;
      },
      { what: 'everything but the held task done', timeoutMs: 20_000 },
    );
    expect(busy.value('deferflow_executor_open_slots')).toBe(3);
    expect(busy.value('deferflow_ti_finish_total', { state: 'success', operator: 'Ok' })).toBe(1);
    expect(busy.value('deferflow_ti_finish_total', { state: 'failed', operator: 'Boom' })).toBe(1);
    expect(busy.value('deferflow_ti_finish_total', { state: 'deferred', operator: 'Nap' })).toBe(1);
    const running = await waitFor(
      async () => {
        const samples = await scrape(schedulerBase);
        return samples.value('deferflow_dag_runs', { state: 'running' }) === 1 ? samples : null;
      },
      { what: 'the run counted as running' },
    );
    expect(running.value('deferflow_dag_runs', { state: 'queued' })).toBe(0);

    writeFileSync(releaseFile, '');
    const done = await waitFor(
      async () => {
        const samples = await scrape(workerBase);
        return samples.value('deferflow_ti_finish_total', { state: 'success', operator: 'UntilReleased' }) === 1 &&
          samples.value('deferflow_executor_running_tasks') === 0
          ? samples
          : null;
      },
      { what: 'the held task done' },
    );
    expect(done.value('deferflow_executor_open_slots')).toBe(4);
    expect(done.sum('deferflow_ti_finish_total')).toBe(5);
    // One duration per run of a try: Nap ran twice (before and after its deferral).
    expect(done.value('deferflow_task_duration_seconds_count', { operator: 'Nap' })).toBe(2);
    expect(done.value('deferflow_task_duration_seconds_count', { operator: 'Ok' })).toBe(1);
    expect(done.value('deferflow_task_duration_seconds_count', { operator: 'UntilReleased' })).toBe(1);
    expect(done.value('deferflow_task_duration_seconds_sum', { operator: 'UntilReleased' })).toBeGreaterThan(0.05);

    const finished = await waitFor(
      async () => {
        const samples = await scrape(schedulerBase);
        return samples.value('deferflow_dag_runs_finished_total', { state: 'failed' }) === 1 && samples.value('deferflow_dag_runs', { state: 'running' }) === 0
          ? samples
          : null;
      },
      { what: `run ${runId} counted as failed` },
    );
    expect(finished.value('deferflow_dag_runs_finished_total', { state: 'success' })).toBeUndefined();
    expect(finished.value('deferflow_scheduler_loop_duration_seconds_count')).toBeGreaterThan(passesBefore);
    expect(finished.value('deferflow_task_instances_deferred')).toBe(0);
    expect(finished.value('deferflow_job_heartbeat_age_seconds', { job_type: 'SchedulerJob' })).toBeLessThan(3);
  });
});
