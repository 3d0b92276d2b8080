// The liveness of every daemon on the status page, in a real headless Chromium, as an operator of
// separate daemons would read it: a triggerer, a scheduler and a worker started apart, the worker
// then killed with SIGKILL. The daemons page shows it dead (its liveness lock let go) while the
// others live; the overview names it, and the DAG file that failed to import.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { sharedBrowser } from '../../support/shared-browser.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, spawnDeferflow, spawnTriggerer, stopCleanly } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();

describe.each(testDialects)('the daemons page in Chromium on %s', (dialect) => {
  it('shows each daemon alive with what it holds, a SIGKILLed worker dead at once; the overview names the dead worker and the import error', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('daemons-page');
    writeFileSync(
      path.join(dags, 'hello.mjs'),
      `import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class Hello extends BaseOperator { execute() { return 'hello'; } }
export const dag = new Dag({ dagId: 'hello' }).add(new Hello({ taskId: 'hello' }));
`,
    );
    writeFileSync(path.join(dags, 'broken.mjs'), `throw new Error('this DAG file is broken on purpose');\n`);
    // A file that does not load fails the command (exit 1); the DAGs that loaded are written.
    expect((await spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]).exitWithin(60_000)).code).toBe(1);
    const triggerer = spawnTriggerer(['--db', db.url, '--capacity', '50']);
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url]);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--concurrency', '3', '--queues', 'default,reports']);
    const web = spawnDeferflow(['web', '--db', db.url, '--http-port', '0', '--web-refresh', '1']);
    const [triggererJob, schedulerJob, workerJob] = await Promise.all([triggerer.waitForJob(30_000), scheduler.waitForJob(30_000), worker.waitForJob(30_000)]);
    const base = await web.waitForStatusPage();
    const page = await browser().newPage();
    const consoleErrors: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    page.on('pageerror', (error) => consoleErrors.push(error.message));
    try {
      await page.goto(`${base}/daemons`);
      const row = (job: number) => page.locator(`#daemons tr[data-job="${job}"]`);
      await row(workerJob).waitFor({ timeout: 10_000 });
      for (const job of [triggererJob, schedulerJob, workerJob]) expect(await row(job).getAttribute('data-liveness')).toBe('alive');
      expect(await row(triggererJob).getAttribute('data-kind')).toBe('triggerer');
      expect(await row(triggererJob).textContent()).toContain('0 triggers');
      expect(await row(triggererJob).textContent()).toContain('50');
      expect(await row(workerJob).getAttribute('data-kind')).toBe('worker');
      expect(await row(workerJob).textContent()).toContain('default,reports');
      expect(await row(workerJob).textContent()).toContain('0 task instances');
      expect(await row(schedulerJob).getAttribute('data-kind')).toBe('scheduler');
      expect(await row(workerJob).textContent()).toContain(String(worker.child.pid));

      // SIGKILL: the row still says running; its lock, let go with the process, tells the page at once.
      worker.kill('SIGKILL');
      await worker.exit;
      await page.locator(`#daemons tr[data-job="${workerJob}"][data-liveness="dead"]`).waitFor({ timeout: 10_000 });
      expect(await row(workerJob).textContent()).toContain('process gone');
      expect(await row(triggererJob).getAttribute('data-liveness')).toBe('alive');
      expect(await row(schedulerJob).getAttribute('data-liveness')).toBe('alive');

      // The overview: the dead worker, and the file the scheduler could not import.
      await page.goto(`${base}/`);
      const dead = page.locator('#dead-daemons');
      await dead.waitFor({ timeout: 10_000 });
      expect(await dead.textContent()).toContain(`worker ${workerJob}`);
      await page.locator('#import-errors', { hasText: 'broken.mjs' }).waitFor({ timeout: 10_000 });
      expect(await page.locator('#import-errors').textContent()).toContain('this DAG file is broken on purpose');
      expect(await page.locator('.card', { hasText: 'live workers' }).textContent()).toMatch(/^\s*0\s*live workers/);
      expect(await page.locator('.card', { hasText: 'live triggerers' }).textContent()).toMatch(/^\s*1\s*live triggerers/);
      expect(await page.locator('.card', { hasText: 'live schedulers' }).textContent()).toMatch(/^\s*1\s*live schedulers/);

      // The old address of the triggerers' list shows the triggerers alone.
      await page.goto(`${base}/triggerers`);
      await row(triggererJob).waitFor();
      expect(await page.locator('#daemons tr[data-kind="worker"]').count()).toBe(0);
      expect(consoleErrors).toEqual([]);
    } finally {
      await page.close();
      await stopCleanly([web, scheduler, triggerer]);
    }
  });
});
