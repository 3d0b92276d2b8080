// The charts on the status page, in a real headless Chromium, from the figures the daemons record
// of themselves (here every second, --sample-interval 1): a run whose tasks defer, two of them on
// triggers that fire at once and three on triggers that wait an hour. The triggerer's chart shows
// its running triggers against its capacity, the events chart the two events, the waiting-work
// chart the three deferred task instances, and the worker's chart its slots.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect } from '../../support/databases.ts';
import { sharedBrowser } from '../../support/shared-browser.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow } from '../../support/processes.ts';
import { waitFor } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();

const dagSource = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Wait extends BaseOperator {
  constructor(options) { super(options); this.seconds = options.seconds; }
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: this.seconds }), method: 'resumed' }); }
  resumed() { return 'resumed'; }
}
export const dag = new Dag({ dagId: 'charted' }).add(
  new Wait({ taskId: 'quick_a', seconds: 0.1 }),
  new Wait({ taskId: 'quick_b', seconds: 0.2 }),
  ...['slow_a', 'slow_b', 'slow_c'].map((taskId) => new Wait({ taskId, seconds: 3600 })),
);
`;

describe.each(oneDialect)('the charts page in Chromium on %s', (dialect) => {
  it("charts each daemon's figures: triggers running against capacity, events, deferred task instances, worker slots", async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('charts-page');
    writeFileSync(path.join(dags, 'charted.mjs'), dagSource);
    const standalone = spawnDeferflow([
      'standalone',
      ...['--db', db.url, '--dags', dags, '--trigger-dag', 'charted', '--http-port', '0', '--web-refresh', '0'],
      ...['--sample-interval', '1', '--capacity', '40', '--concurrency', '3'],
    ]);
    const samples = async (jobType: string) =>
      (await db.db.selectFrom('daemon_sample').select(['figures']).where('job_type', '=', jobType).orderBy('id').execute()).map(
        (row) => JSON.parse(row.figures) as Record<string, number>,
      );
    try {
      const base = await standalone.waitForStatusPage();
      // Recorded by the daemons once the quick triggers fired and the slow ones wait.
      await waitFor(async () => (await samples('TriggererJob')).reduce((sum, figures) => sum + figures.events!, 0) >= 2, {
        timeoutMs: 30_000,
        what: 'the triggerer has recorded the two events',
      });
      await waitFor(async () => (await samples('SchedulerJob')).at(-1)?.deferred === 3, { timeoutMs: 30_000, what: 'the scheduler counted 3 deferred' });
      await waitFor(async () => (await samples('TriggererJob')).at(-1)?.running === 3, { timeoutMs: 30_000, what: 'the triggerer runs the 3 slow triggers' });
      const triggerer = await samples('TriggererJob');
      expect(triggerer.every((figures) => figures.capacity === 40 && figures.interval_ms! > 0 && figures.failures === 0)).toBe(true);
      expect(await samples('WorkerJob')).toContainEqual(expect.objectContaining({ slots: 3 }));

      const page = await browser().newPage();
      page.setDefaultTimeout(10_000);
      const consoleErrors: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error') consoleErrors.push(message.text());
      });
      await page.goto(`${base}/charts`);
      const series = (chart: string, label: string) => page.locator(`#${chart} path[data-series="${label}"]`);
      const triggererJob = (await db.db.selectFrom('job').select('id').where('job_type', '=', 'TriggererJob').executeTakeFirstOrThrow()).id;
      const workerJob = (await db.db.selectFrom('job').select('id').where('job_type', '=', 'WorkerJob').executeTakeFirstOrThrow()).id;
      const schedulerJob = (await db.db.selectFrom('job').select('id').where('job_type', '=', 'SchedulerJob').executeTakeFirstOrThrow()).id;
      const running = series('chart-triggers', `triggerer ${triggererJob}`);
      expect(Number(await running.getAttribute('data-points'))).toBeGreaterThanOrEqual(2);
      expect(await running.getAttribute('data-last')).toBe('3');
      const capacity = series('chart-triggers', `triggerer ${triggererJob} capacity`);
      expect(await capacity.getAttribute('data-last')).toBe('40');
      expect(await capacity.getAttribute('stroke-dasharray')).not.toBeNull();
      expect(await series('chart-deferred', `scheduler ${schedulerJob}`).getAttribute('data-last')).toBe('3');
      expect(await series('chart-slots', `worker ${workerJob} slots`).getAttribute('data-last')).toBe('3');
      // Events per minute: the two events, in the samples of the second they fired in.
      const events = series('chart-events', `triggerer ${triggererJob}`);
      expect(await events.locator('title').textContent()).toMatch(/^triggerer \d+: [\d.,]+ per minute$/);
      expect(await page.locator('#chart-failures path[data-series]').getAttribute('data-last')).toBe('0');
      // The window's form: 24 hours reads the same samples.
      await page.selectOption('form.filter select[name="hours"]', '24');
      await page.click('form.filter button');
      expect(new URL(page.url()).searchParams.get('hours')).toBe('24');
      expect(Number(await running.getAttribute('data-points'))).toBeGreaterThanOrEqual(2);
      expect(consoleErrors).toEqual([]);
    } finally {
      standalone.kill('SIGTERM');
      await standalone.exitWithin(30_000);
    }
  }, 90_000);
});
