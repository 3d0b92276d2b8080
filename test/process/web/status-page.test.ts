// The status page in a real headless Chromium, as a person watching deferflow would use it: a
// deferred task instance shows with its trigger, and once the trigger fires the page (which
// refreshes itself) shows it done; the DAG page and a task instance's log page.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { sharedBrowser } from '../../support/shared-browser.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, stopCleanly } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const browser = sharedBrowser();

const dagSource = (flag: string) => `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { FileTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class WaitForFile extends BaseOperator {
  execute(context) {
    context.log.info('waiting for the flag');
    return this.defer({ trigger: new FileTrigger({ path: ${JSON.stringify(flag)}, pollInterval: 0.2 }), method: 'arrived' });
  }
  arrived(context, event) { context.log.info('the flag arrived'); return event; }
}
class Report extends BaseOperator { execute() { return 'reported'; } }
const wait = new WaitForFile({ taskId: 'wait_for_flag' });
const report = new Report({ taskId: 'report' });
export const dag = new Dag({ dagId: 'flagged', description: 'waits for a flag file, then reports' }).add(wait, report);
wait.before(report);
`;

describe.each(testDialects)('the status page in Chromium on %s', (dialect) => {
  it('shows a deferred task instance with its trigger, then the task done once the trigger fires; the DAG page; the log page', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('status-page');
    const flag = path.join(dags, 'flag.txt');
    writeFileSync(path.join(dags, 'flagged.mjs'), dagSource(flag));
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'flagged', '--http-port', '0', '--web-refresh', '1']);
    const base = await standalone.waitForStatusPage();
    const page = await browser().newPage();
    try {
      // The deferred page lists the waiting task with its trigger; it refreshes itself until then.
      await page.goto(`${base}/deferred`);
      const row = page.locator('#deferred tr', { hasText: 'wait_for_flag' });
      await row.waitFor({ timeout: 20_000 });
      await expect(row.textContent()).resolves.toContain('FileTrigger');
      await expect(row.textContent()).resolves.toMatch(/trigger \d+/);
      // The count is read beside the rows, not in their snapshot: a refresh during the deferral's
      // commit can count it in one and not the other, and the next refresh agrees.
      await page.locator('h1', { hasText: 'Deferred task instances (1)' }).waitFor({ timeout: 10_000 });

      // The run page, reached by the link in the row, shows it deferred.
      await row.locator('a', { hasText: /^manual__/ }).click();
      await page.locator('#task-instances tr[data-task="wait_for_flag"]', { hasText: 'deferred' }).waitFor({ timeout: 10_000 });

      // The trigger fires; the page, refreshing itself, shows both tasks done.
      writeFileSync(flag, 'here');
      await page.locator('#task-instances tr[data-task="report"]', { hasText: 'success' }).waitFor({ timeout: 20_000 });
      await page.locator('#task-instances tr[data-task="wait_for_flag"]', { hasText: 'success' }).waitFor({ timeout: 5_000 });
      await page.locator('h1 .state-success').waitFor({ timeout: 10_000 });

      // The log page: the worker's lines and the deferral, then the resume.
      await page.locator('#task-instances tr[data-task="wait_for_flag"] a', { hasText: 'log' }).click();
      const log = page.locator('#log');
      await log.waitFor();
      const text = (await log.textContent()) ?? '';
      expect(text).toContain('waiting for the flag');
      expect(text).toContain('deferred; resumes at arrived');
      expect(text).toContain('the flag arrived');
      expect(text.indexOf('waiting for the flag')).toBeLessThan(text.indexOf('the flag arrived'));

      // The DAG page, drawn from the serialized DAG: its tasks, their dependencies, its runs.
      await page.goto(`${base}/dags/flagged`);
      expect(await page.locator('h1').textContent()).toBe('DAG flagged');
      expect(await page.locator('#tasks tr[data-task="report"]').textContent()).toContain('wait_for_flag');
      expect(await page.locator('#tasks tr[data-task="wait_for_flag"]').textContent()).toContain('WaitForFile');
      expect(await page.locator('#runs').textContent()).toContain('success');

      // Gone from the deferred page.
      await page.goto(`${base}/deferred`);
      expect(await page.locator('h1').textContent()).toContain('(0)');
    } finally {
      await page.close();
    }
    await stopCleanly([standalone]);
  }, 90_000);
});
