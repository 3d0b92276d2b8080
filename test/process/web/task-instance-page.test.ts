// A run's timeline, a DAG's grid and a task instance's page in a real headless Chromium, as an
// operator would use them: the timeline's bars from the state history; the grid's cells in their
// states and its run filter; what a task returned (a connection's password in it masked, as in
// logs), the event its trigger delivered, a failed task's error with the stack's frames of the DAG
// file before Node's and deferflow's; a sensor's reschedules; a run of a wide mapped task, paged.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/database/connect.ts';
import { toDbTime } from '../../../src/database/schema.ts';
import { dropTestDatabases, oneDialect } from '../../support/databases.ts';
import { sharedBrowser } from '../../support/shared-browser.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();
const PASSWORD = 's3cr3t-pass-7781';

const dagSource = `
import { readFileSync, writeFileSync } from 'node:fs';
import { BaseOperator, BaseSensorOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Extract extends BaseOperator { execute() { return { rows: 42, note: 'loaded with ${PASSWORD}' }; } }
class Wait extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.2 }), method: 'resumed' }); }
  resumed(_context, event) { return { resumed: true, firedAt: event }; }
}
function checkTotals() { throw new Error('totals do not add up: exploded on purpose'); }
class Explode extends BaseOperator { execute() { return checkTotals(); } }
// Succeeds on its third poke: two reschedules before it.
class ThirdPoke extends BaseSensorOperator {
  poke() {
    const counter = import.meta.dirname + '/pokes.txt';
    let pokes = 0;
    try { pokes = Number(readFileSync(counter, 'utf8')); } catch {}
    writeFileSync(counter, String(pokes + 1));
    return pokes + 1 >= 3;
  }
}
export const dag = new Dag({ dagId: 'inspected' }).add(
  new Extract({ taskId: 'extract' }),
  new Wait({ taskId: 'wait' }),
  new Explode({ taskId: 'explode', retries: 0 }),
  new ThirdPoke({ taskId: 'sense', mode: 'reschedule', pokeInterval: 0.2 }),
);
`;

/** A finished run of DAG `dagId` whose one task, mapped, has `count` task instances (the last ten failed), each started a second after the one before. */
async function insertMappedRun({ db }: Database, dagId: string, runId: string, count: number): Promise<void> {
  const start = Date.now() - count * 1000;
  await db
    .insertInto('dag_run')
    .values({
      dag_id: dagId,
      run_id: runId,
      run_type: 'manual',
      logical_date: toDbTime(start),
      state: 'failed',
      conf: '{}',
      created_at: toDbTime(start),
      start_date: toDbTime(start),
      updated_at: toDbTime(start),
    })
    .execute();
  await db
    .insertInto('task_instance')
    .values(
      Array.from({ length: count }, (_, i) => ({
        dag_id: dagId,
        task_id: 'map',
        map_index: i,
        run_id: runId,
        state: 'running' as const,
        try_number: 1,
        start_date: toDbTime(start + i * 1000),
        updated_at: toDbTime(start + i * 1000),
      })),
    )
    .execute();
  // Each ran half a second: the database's history records both changes, as a worker's would make.
  for (let i = 0; i < count; i++) {
    const end = toDbTime(start + i * 1000 + 500);
    await db
      .updateTable('task_instance')
      .set({ state: i < count - 10 ? 'success' : 'failed', end_date: end, updated_at: end })
      .where('run_id', '=', runId)
      .where('map_index', '=', i)
      .execute();
  }
}

describe.each(oneDialect)('the task instance page in Chromium on %s', (dialect) => {
  it("shows the DAG's grid of runs × tasks with its filter, what a task returned (secrets masked), the event that resumed it, a failure with the DAG file's frames first, and a wide run paged", async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('task-instance-page');
    writeFileSync(path.join(dags, 'inspected.mjs'), dagSource);
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'inspected', '--http-port', '0', '--web-refresh', '1'], {
      DEFERFLOW_CONN_WAREHOUSE: `postgres://etl:${PASSWORD}@db.invalid:5432/warehouse`,
    });
    const base = await standalone.waitForStatusPage();
    const page = await browser().newPage();
    // A step that finds nothing fails naming itself, well inside the test's own timeout.
    page.setDefaultTimeout(10_000);
    const consoleErrors: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    try {
      await page.goto(`${base}/dags/inspected`);
      await page
        .locator('#runs a', { hasText: /^manual__/ })
        .first()
        .click();
      await page.locator('h1 .state-failed').waitFor({ timeout: 30_000 });
      const runPage = page.url();

      // The run's timeline, from the history the database wrote: the waiting task ran, waited
      // deferred on its trigger, and ran again; the sensor gave its slot back twice.
      const bars = (task: string, state: string) => page.locator(`#timeline .tl-row[data-task="${task}"] .tl-bar[data-state="${state}"]`);
      expect(await bars('wait', 'running').count()).toBe(2);
      expect(await bars('wait', 'deferred').count()).toBe(1);
      expect(await bars('wait', 'deferred').getAttribute('title')).toMatch(/^deferred \d+\.\d s · try 1 · trigger \d+$/);
      expect(await bars('sense', 'up_for_reschedule').count()).toBe(2);
      expect(await bars('explode', 'running').count()).toBe(1);
      expect(await page.locator('#slot-time').textContent()).toMatch(/^Worker slots held \d+\.\d s \(queued and running\); waited (\d+\.\d) s without one/);
      const waited = Number(/waited (\d+\.\d) s/.exec((await page.locator('#slot-time').textContent()) ?? '')![1]);
      // The deferral (0.2 s) and two reschedules (0.2 s each) at least.
      expect(waited).toBeGreaterThanOrEqual(0.5);

      // The DAG's grid: the run's column, a cell per task in its state, each opening its task
      // instance; filtered by run state and date through the form.
      await page.goto(`${base}/dags/inspected`);
      const cell = (task: string) => page.locator(`#grid tr[data-task="${task}"] a.cell`);
      expect(await cell('extract').getAttribute('data-state')).toBe('success');
      expect(await cell('wait').getAttribute('data-state')).toBe('success');
      expect(await cell('explode').getAttribute('data-state')).toBe('failed');
      await page.selectOption('#grid-filter select[name="state"]', 'success');
      await page.click('#grid-filter button');
      await page.locator('text=No run matches the filter.').waitFor();
      expect(await page.locator('#grid').count()).toBe(0);
      expect(new URL(page.url()).searchParams.get('state')).toBe('success');
      await page.goto(`${base}/dags/inspected?state=failed&since=2000-01-01`);
      expect(await cell('explode').count()).toBe(1);
      await page.goto(`${base}/dags/inspected?since=2999-01-01`);
      expect(await page.locator('#grid').count()).toBe(0);
      await page.goto(`${base}/dags/inspected?state=broken`);
      expect(await page.locator('.warning').textContent()).toContain('state "broken" is not a run state');
      expect(await cell('explode').count()).toBe(1);
      await cell('explode').click();
      await page.locator('#error-message').waitFor();
      expect(page.url()).toMatch(/\/ti\/\d+$/);

      await page.goto(runPage);
      await page.locator('#task-instances tr[data-task="extract"] a', { hasText: 'extract' }).click();
      const returned = (await page.locator('#return-value').textContent()) ?? '';
      expect(JSON.parse(returned)).toEqual({ rows: 42, note: 'loaded with ***' });
      expect(await page.content()).not.toContain(PASSWORD);
      expect(await page.locator('#ti-facts').textContent()).toContain('1 of 1');

      await page.goto(runPage);
      await page.locator('#task-instances tr[data-task="wait"] a', { hasText: 'wait' }).click();
      const event = JSON.parse((await page.locator('#event').textContent()) ?? 'null') as unknown;
      expect(JSON.parse((await page.locator('#return-value').textContent()) ?? '')).toEqual({ resumed: true, firedAt: event });
      expect(event).not.toBeNull();

      await page.goto(runPage);
      await page.locator('#task-instances tr[data-task="explode"] a', { hasText: 'explode' }).click();
      expect(await page.locator('#error-message').textContent()).toContain('totals do not add up: exploded on purpose');
      const stack = ((await page.locator('#error-stack').textContent()) ?? '').split('\n');
      // The message, then the DAG file's own frames (checkTotals first), before anything else.
      expect(stack[0]).toContain('exploded on purpose');
      expect(stack[1]).toMatch(/at checkTotals .*inspected\.mjs/);
      expect(stack.slice(1).every((frame) => frame.includes('inspected.mjs'))).toBe(true);
      expect(await page.locator('details summary').textContent()).toMatch(/\d+ frames of Node, dependencies and deferflow/);
      // The sensor in reschedule mode: its two reschedules, then its success.
      await page.goto(runPage);
      await page.locator('#task-instances tr[data-task="sense"] a', { hasText: 'sense' }).click();
      expect(await page.locator('#reschedules tr').count()).toBe(3);
      expect(await page.locator('h1 .state-success').count()).toBe(1);

      await page.locator('a', { hasText: /^log$/ }).click();
      await page.locator('#log').waitFor();

      // A run of a task mapped over 250 items is paged, 100 task instances at a time, under the
      // whole run's counts; the timeline's rows are the page's.
      await insertMappedRun(db, 'mapped', 'manual__mapped', 250);
      await page.goto(`${base}/dags/mapped/runs/manual__mapped`);
      expect(await page.locator('#run-summary').textContent()).toBe('250 task instances: 240 success, 10 failed');
      const labels = () => page.locator('#timeline .tl-row .tl-label').allTextContents();
      const rows = page.locator('#task-instances tr[data-task="map"]');
      expect(await page.locator('#run-pager').first().textContent()).toBe('task instances 1–100 of 250 next 100 →');
      expect(await labels()).toEqual(Array.from({ length: 100 }, (_, i) => `map [${i}]`));
      expect(await rows.count()).toBe(100);
      expect(await page.locator('#slot-time').textContent()).toMatch(/, all 250 task instances together\.$/);
      await page.locator('#run-pager a', { hasText: 'next 100' }).first().click();
      await page.locator('#run-pager', { hasText: 'task instances 101–200 of 250' }).first().waitFor();
      expect((await labels())[0]).toBe('map [100]');
      await page.locator('#run-pager a', { hasText: 'next 50' }).first().click();
      await page.locator('#run-pager', { hasText: 'task instances 201–250 of 250' }).first().waitFor();
      expect(await rows.count()).toBe(50);
      expect(await page.locator('#run-pager').first().textContent()).toBe('task instances 201–250 of 250 ← previous 100');
      expect(await rows.last().getAttribute('data-map-index')).toBe('249');
      expect(await page.locator('#task-instances tr[data-map-index="249"] .state').textContent()).toBe('failed');
      expect(consoleErrors).toEqual([]);
    } finally {
      await page.close();
      standalone.kill('SIGTERM');
      // Stopped, standalone exits as the run it triggered ended: failed (a task of it did).
      expect(await standalone.exitWithin(30_000)).toEqual({ code: 1, signal: null });
    }
  });
});
