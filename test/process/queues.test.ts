// Queues as an operator runs them: a DAG with a task in queue `gpu` next to a task in none; a
// standalone process serving `default` runs the one and leaves the other, which `jobs queues`,
// the status page (in Chromium) and /metrics report as work no daemon serves; a worker started
// with --queues gpu runs it, and its trigger waits, in queue gpu, until a triggerer started with
// --queues gpu runs that. Who ran what is read from the database and the daemons' own lines.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, RUNNER_PROCESSES, spawnDeferflow, spawnTriggerer, stopCleanly } from '../support/processes.ts';
import { scrape } from '../support/scrape.ts';
import { sharedBrowser } from '../support/shared-browser.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();

const ROUTED_DAG = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Plain extends BaseOperator { execute() { return 'plain'; } }
class OnGpu extends BaseOperator {
  execute(): never { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.3 }), method: 'resume' }); }
  resume() { return 'resumed'; }
}
export const dag = new Dag({ dagId: 'routed' });
dag.add(new Plain({ taskId: 'plain' }), new OnGpu({ taskId: 'on_gpu', queue: 'gpu' }));
`;

describe.each(testDialects)('queues on %s', (dialect) => {
  it('a task in queue gpu waits for a worker and a triggerer serving gpu, reported meanwhile by jobs queues, the status page and /metrics', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('queues');
    writeFileSync(path.join(dags, 'routed.mts'), ROUTED_DAG);
    const fast = ['--poll-interval', '0.1', '--heartbeat-interval', '0.5'];
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'routed', '--http-port', '0'], RUNNER_PROCESSES);
    const base = await standalone.waitForStatusPage();
    const ti = (taskId: string) =>
      db.db.selectFrom('task_instance').select(['state', 'queue', 'pid', 'trigger_id', 'return_value']).where('task_id', '=', taskId).executeTakeFirst();
    await waitFor(async () => (await ti('plain'))?.state === 'success', { what: 'the task in no queue to run on standalone', timeoutMs: 30_000 });
    await waitFor(async () => (await ti('on_gpu'))?.state === 'scheduled', { what: 'the gpu task to be scheduled', timeoutMs: 10_000 });
    expect((await ti('plain'))?.queue).toBe('default');
    expect((await ti('on_gpu'))?.queue).toBe('gpu');

    // Reported: the CLI fails, naming the queue and what is missing.
    const queues = spawnDeferflow(['jobs', 'queues', '--db', db.url]);
    expect(await queues.exitWithin()).toEqual({ code: 1, signal: null });
    expect(queues.text.find((line) => line.startsWith('gpu '))).toMatch(/^gpu\s+1\s+-\s+0\s+-\s+NO \(task_instances\)$/);
    expect(queues.text.find((line) => line.startsWith('default '))).toMatch(/yes$/);
    expect(queues.stderr.join('\n')).toContain('queue gpu: 1 scheduled task instance(s) and no live worker serving it (start one with --queues gpu)');
    // The probe of a daemon says it too, but passes: the worker it probes is alive.
    const check = spawnDeferflow(['jobs', 'check', '--db', db.url, '--job-type', 'worker']);
    expect(await check.exitWithin()).toEqual({ code: 0, signal: null });
    expect(check.text).toContain('warning: queue gpu: 1 scheduled task instance(s) and no live worker serving it (start one with --queues gpu)');
    // The metric, and the status page in a browser.
    await waitFor(async () => (await scrape(base)).value('deferflow_queue_unserved_work', { queue: 'gpu', kind: 'task_instances' }) === 1, {
      what: 'the unserved-work gauge',
    });
    const page = await browser().newPage();
    try {
      await page.goto(base);
      expect(await page.locator('#unserved-queues').textContent()).toContain('queue gpu: 1 scheduled task instance(s) and no live worker serving it');
      await page.locator('#unserved-queues a', { hasText: 'queues' }).click();
      expect(await page.locator('#queues tr[data-queue="gpu"]').textContent()).toContain('no worker');
      expect(await page.locator('#queues tr[data-queue="default"]').textContent()).toContain('yes');
    } finally {
      await page.close();
    }

    // A worker serving gpu runs it; it defers, and its trigger is in queue gpu, which the standalone triggerer leaves.
    const gpuWorker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--queues', 'gpu', ...fast], RUNNER_PROCESSES);
    const gpuWorkerJob = await gpuWorker.waitForJob(20_000);
    await waitFor(async () => (await ti('on_gpu'))?.state === 'deferred', { what: 'the gpu task to run and defer', timeoutMs: 30_000 });
    const waitingOn = (await ti('on_gpu'))!.trigger_id!;
    const trigger = await db.db.selectFrom('trigger').select(['queue', 'triggerer_id']).where('id', '=', waitingOn).executeTakeFirstOrThrow();
    expect(trigger).toEqual({ queue: 'gpu', triggerer_id: null });
    const stillWaiting = spawnDeferflow(['jobs', 'queues', '--db', db.url, '--json']);
    expect(await stillWaiting.exitWithin()).toEqual({ code: 1, signal: null });
    const gpu = (JSON.parse(stillWaiting.text.join('\n')) as { queue: string; live_workers: number[]; unserved: string[] }[]).find(
      (row) => row.queue === 'gpu',
    );
    expect(gpu).toMatchObject({ live_workers: [gpuWorkerJob], unserved: ['triggers'] });

    // A triggerer serving gpu runs the trigger; the gpu worker resumes the task.
    const gpuTriggerer = spawnTriggerer(['--db', db.url, '--queues', 'gpu', ...fast]);
    const gpuTriggererJob = await gpuTriggerer.waitForJob(20_000);
    await gpuTriggerer.waitForLine((line) => line.claimed === 1, 20_000);
    await waitFor(async () => (await ti('on_gpu'))?.state === 'success', { what: 'the gpu task to resume and succeed', timeoutMs: 30_000 });
    expect(JSON.parse((await ti('on_gpu'))!.return_value!)).toBe('resumed');
    // Run and resumed by the gpu worker (the task instance names the worker process that ran it).
    expect((await ti('on_gpu'))!.pid).toBe(gpuWorker.pid);
    expect((await ti('plain'))!.pid).toBe(standalone.pid);
    expect(standalone.matching((line) => typeof line.claimed === 'number')).toEqual([]);
    const jobs = await db.db.selectFrom('job').select(['id', 'job_type', 'queues']).where('id', 'in', [gpuWorkerJob, gpuTriggererJob]).orderBy('id').execute();
    expect(jobs.map((job) => job.queues)).toEqual(['gpu', 'gpu']);

    const served = spawnDeferflow(['jobs', 'queues', '--db', db.url]);
    expect(await served.exitWithin()).toEqual({ code: 0, signal: null });
    await stopCleanly([gpuTriggerer, gpuWorker, standalone]);
  }, 120_000);

  it('refuses a queue name it cannot route by, before starting (DF_INVALID_OPTION)', async () => {
    const db = await scratch.database(dialect);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--queues', 'gpu,bad queue']);
    expect((await worker.exitWithin()).code).toBe(2);
    expect(worker.stderr.join('\n')).toMatch(/DF_INVALID_OPTION.*queues.*"bad queue"/);
    expect(await db.db.selectFrom('job').select('id').execute()).toEqual([]);
  }, 60_000);
});
