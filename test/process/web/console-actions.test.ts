// The status page's actions in a real headless Chromium, as an operator uses them: signed in with
// the operator token (her name as basic auth's user name), she triggers a run with conf, marks a
// deferred task success (its trigger goes, its downstream task runs), clears a failed one and one
// with its downstream tasks (after a confirmation page), pauses and unpauses the DAG, sends a
// signal and answers a question; the audit log shows each, with who and from where. A viewer sees
// no forms and is refused when posting one; an operator's post without the CSRF token, or sent
// from another origin, is refused; nothing changes when refused. The CLI's actions are logged too,
// and a signal key's page names who sent each version.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect } from '../../support/databases.ts';
import { sharedBrowser } from '../../support/shared-browser.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow } from '../../support/processes.ts';
import { openStores } from '../../../src/storage/index.ts';
import { waitFor } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();
const OPERATOR_TOKEN = 'console-operator-token-0123456789';

const dagSource = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Wait extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 3600 }), method: 'resumed' }); }
  resumed() { return 'resumed'; }
}
class Echo extends BaseOperator { execute(context) { return { conf: context.dagRun.conf }; } }
class Explode extends BaseOperator { execute() { throw new Error('exploded on purpose'); } }
class Ask extends BaseOperator {
  execute(context) { return this.awaitInput(context, { subject: 'Ship it?', options: ['yes', 'no'], method: 'answered' }); }
  answered(_context, response) { return { chosen: response.chosen, by: response.by }; }
}
const wait = new Wait({ taskId: 'wait' });
const after = new Echo({ taskId: 'after' });
export const dag = new Dag({ dagId: 'console' }).add(wait, after, new Explode({ taskId: 'explode', retries: 0 }), new Ask({ taskId: 'ask' }));
wait.before(after);
`;

describe.each(oneDialect)('the console actions in Chromium on %s', (dialect) => {
  it('trigger, mark, clear (with downstream), pause, signal and respond as an operator, each in the audit log; refused for a viewer, without CSRF or from another origin', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('console-actions');
    writeFileSync(path.join(dags, 'console.mjs'), dagSource);
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--http-port', '0', '--web-refresh', '0'], {
      DEFERFLOW_WEB_OPERATOR_TOKEN: OPERATOR_TOKEN,
    });
    const ti = (taskId: string) =>
      db.db
        .selectFrom('task_instance')
        .select(['id', 'state', 'try_number', 'trigger_id', 'return_value', 'run_id'])
        .where('task_id', '=', taskId)
        .executeTakeFirst();
    const stateOf = async (taskId: string) => (await ti(taskId))?.state;
    const auditCount = async () =>
      Number(
        (
          await db.db
            .selectFrom('audit_log')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    const base = await standalone.waitForStatusPage();
    const operator = await browser().newContext({ httpCredentials: { username: 'alice', password: OPERATOR_TOKEN } });
    const viewer = await browser().newContext();
    const page = await operator.newPage();
    page.setDefaultTimeout(10_000);
    const consoleErrors: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    try {
      // Anyone on this machine sees the pages (no viewer token), without forms.
      const viewerPage = await viewer.newPage();
      viewerPage.setDefaultTimeout(10_000);
      await viewerPage.goto(`${base}/dags/console`);
      expect(await viewerPage.locator('header .who').textContent()).toContain('sign in');
      expect(await viewerPage.locator('#pause').count()).toBe(0);
      await viewerPage.goto(`${base}/dags/console/trigger`);
      expect(await viewerPage.locator('#needs-operator').count()).toBe(1);

      // Signing in asks for the operator token (basic auth); her name is the user name.
      await page.goto(`${base}/sign-in`);
      expect(new URL(page.url()).pathname).toBe('/');
      expect(await page.locator('header .who').textContent()).toBe('operator alice');

      // Trigger a run with conf: the run's page, with the notice read back from the audit log.
      await page.goto(`${base}/dags/console`);
      await page.click('#trigger-run');
      await page.fill('textarea[name="conf"]', '{"rows": 3}');
      await page.click('#trigger button[type="submit"]');
      await page.locator('#done').waitFor();
      expect(await page.locator('#done').textContent()).toMatch(/^trigger run by alice: run manual__\S+ queued$/);
      expect(new URL(page.url()).pathname).toMatch(/^\/dags\/console\/runs\/manual__/);
      const runPage = page.url().replace(/\?.*$/, '');
      const run = await db.db.selectFrom('dag_run').select(['run_id', 'conf']).where('dag_id', '=', 'console').executeTakeFirstOrThrow();
      expect(JSON.parse(run.conf)).toEqual({ rows: 3 });

      // A conf that is not JSON is refused with its code; nothing is made.
      await page.goto(`${base}/dags/console/trigger`);
      await page.fill('textarea[name="conf"]', '{rows: 3');
      await page.click('#trigger button[type="submit"]');
      expect(await page.locator('#refused').getAttribute('data-code')).toBe('DF_NOT_JSON');
      expect((await db.db.selectFrom('dag_run').select('id').execute()).length).toBe(1);

      // Mark the deferred task success, after a confirmation: its trigger goes, its downstream runs.
      await waitFor(async () => (await stateOf('wait')) === 'deferred', { timeoutMs: 30_000, what: 'wait deferred' });
      const wait = (await ti('wait'))!;
      expect(wait.trigger_id).not.toBeNull();
      await page.goto(`${base}/ti/${wait.id}`);
      await page.click('#mark-success button');
      expect(await page.locator('#confirm-what').textContent()).toContain('Mark task wait of run');
      expect(await stateOf('wait')).toBe('deferred');
      await page.click('#confirm button');
      await page.locator('#done').waitFor();
      expect(await page.locator('#done').textContent()).toBe('mark success by alice: marked success (was deferred); stopped 1 trigger(s)');
      expect(await page.locator('h1 .state').textContent()).toBe('success');
      expect(await db.db.selectFrom('trigger').select('id').where('id', '=', wait.trigger_id!).executeTakeFirst()).toBeUndefined();
      await waitFor(async () => (await stateOf('after')) === 'success', { timeoutMs: 30_000, what: 'after ran once wait was marked success' });
      expect(JSON.parse((await ti('after'))!.return_value!)).toEqual({ conf: { rows: 3 } });

      // Clear the failed task: it runs again (try 2) and fails again.
      await waitFor(async () => (await stateOf('explode')) === 'failed', { timeoutMs: 30_000, what: 'explode failed' });
      const explode = (await ti('explode'))!;
      await page.goto(`${base}/ti/${explode.id}`);
      await page.click('#clear button');
      expect(await page.locator('#confirm-what').textContent()).toContain('Clear task explode');
      await page.click('#confirm button');
      await page.locator('#done').waitFor();
      expect(await page.locator('#done').textContent()).toBe('clear by alice: cleared 1 task instance(s); stopped 0 trigger(s)');
      expect(page.url().replace(/\?.*$/, '')).toBe(runPage);
      await waitFor(async () => (await ti('explode'))!.try_number === 2 && (await stateOf('explode')) === 'failed', {
        timeoutMs: 30_000,
        what: 'explode tried again',
      });

      // Clear wait with its downstream task: the confirmation names both; wait defers again.
      await page.goto(`${base}/ti/${wait.id}`);
      await page.click('#clear-downstream button');
      expect(await page.locator('#confirm-what').textContent()).toContain('and the 1 task(s) downstream of it (after)');
      await page.click('#confirm button');
      await page.locator('#done').waitFor();
      await waitFor(async () => (await stateOf('wait')) === 'deferred', { timeoutMs: 30_000, what: 'wait deferred again' });
      expect(await stateOf('after')).toBeNull();

      // Pause and unpause.
      await page.goto(`${base}/dags/console`);
      await page.click('#pause button');
      await page.locator('#paused').waitFor();
      expect((await db.db.selectFrom('serialized_dag').select('paused').executeTakeFirstOrThrow()).paused).toBe(1);
      await page.click('#unpause button');
      await page.locator('#pause').waitFor();
      expect((await db.db.selectFrom('serialized_dag').select('paused').executeTakeFirstOrThrow()).paused).toBe(0);

      // Send a signal.
      await page.goto(`${base}/signals`);
      await page.fill('#send-signal input[name="key"]', 'console-test');
      await page.fill('#send-signal input[name="value"]', '{"ok": true}');
      await page.click('#send-signal button');
      await page.locator('#done').waitFor();
      expect(await page.locator('#signal-keys tr[data-key="console-test"] td.num').textContent()).toBe('1');

      // Answer the question: the response is hers.
      await waitFor(async () => (await stateOf('ask')) === 'awaiting_input', { timeoutMs: 30_000, what: 'ask awaiting input' });
      const ask = (await ti('ask'))!;
      await page.goto(`${base}/ti/${ask.id}/input`);
      await page.click('#respond button[value="yes"]');
      await page.locator('#done').waitFor();
      await waitFor(async () => (await stateOf('ask')) === 'success', { timeoutMs: 30_000, what: 'ask answered and resumed' });
      expect(JSON.parse((await ti('ask'))!.return_value!)).toEqual({ chosen: ['yes'], by: 'alice' });

      // Refusals change nothing: a viewer posting a valid form, an operator without the CSRF
      // token, and one whose form came from another origin.
      await page.goto(`${base}/signals`);
      const csrf = await page.locator('#send-signal input[name="csrf"]').inputValue();
      const before = await auditCount();
      const asViewer = await viewerPage.request.post(`${base}/ti/${explode.id}/mark`, { form: { state: 'success', confirmed: 'yes', csrf } });
      expect(asViewer.status()).toBe(403);
      expect(await asViewer.text()).toContain('needs the operator role');
      // As the browser sends it once signed in (a request made by script is not challenged).
      const signedIn = { authorization: `Basic ${Buffer.from(`alice:${OPERATOR_TOKEN}`).toString('base64')}` };
      const noCsrf = await page.request.post(`${base}/ti/${explode.id}/mark`, { form: { state: 'success', confirmed: 'yes' }, headers: signedIn });
      expect(noCsrf.status()).toBe(403);
      expect(await noCsrf.text()).toContain('CSRF');
      const otherOrigin = await page.request.post(`${base}/ti/${explode.id}/mark`, {
        form: { state: 'success', confirmed: 'yes', csrf },
        headers: { ...signedIn, origin: 'https://evil.example' },
      });
      expect(otherOrigin.status()).toBe(403);
      expect(await otherOrigin.text()).toContain('from https://evil.example');
      expect(await stateOf('explode')).toBe('failed');
      expect(await auditCount()).toBe(before);

      // The CLI's actions are logged beside the page's.
      const cli = spawnDeferflow(['tasks', 'mark', '--run', run.run_id, '--task', 'explode', '--state', 'success', '--db', db.url]);
      expect((await cli.exitWithin()).code).toBe(0);
      expect(cli.text.join('\n')).toContain(`marked task explode of run "${run.run_id}" success`);

      // A key's versions, each with who sent it: from the page, from the CLI, and through the
      // API (no sender recorded).
      const cliSignal = spawnDeferflow(['signal', 'send', 'console-test', '"from the shell"', '--db', db.url]);
      expect((await cliSignal.exitWithin()).code).toBe(0);
      await openStores(db).signals.sendSignal('console-test', '{"via": "api"}');
      await page.goto(`${base}/signals`);
      await page.locator('#signal-keys a', { hasText: 'console-test' }).click();
      const version = (n: number) => page.locator(`#signal-versions tr[data-version="${n}"] td`);
      expect(await version(1).nth(2).textContent()).toBe('{"ok":true}');
      expect(await version(1).nth(3).textContent()).toMatch(/^alice \(web, /);
      expect(await version(2).nth(2).textContent()).toBe('"from the shell"');
      expect(await version(2).nth(3).textContent()).toMatch(/^\S+ \(cli, /);
      expect(await version(3).nth(3).textContent()).toBe('not recorded');

      // The audit log: every action, newest first, who, from where, and what came of it.
      await page.goto(`${base}/audit`);
      const rows = page.locator('#audit tr[data-audit]');
      const actions = await rows.locator('td:nth-child(4)').allTextContents();
      expect(actions).toEqual(['signal', 'mark_success', 'respond', 'signal', 'unpause', 'pause', 'clear', 'clear', 'mark_success', 'trigger_run']);
      for (const i of [0, 1]) expect(await rows.nth(i).locator('td:nth-child(3)').textContent()).toMatch(/^cli /);
      for (let i = 2; i < actions.length; i++) {
        expect(await rows.nth(i).locator('td:nth-child(2)').textContent()).toBe('alice');
        expect(await rows.nth(i).locator('td:nth-child(3)').textContent()).toMatch(/^web 127\.0\.0\.1$|^web ::ffff:127\.0\.0\.1$/);
      }
      // The one error Chromium reports is the refused conf's answer (400).
      expect(consoleErrors).toEqual(['Failed to load resource: the server responded with a status of 400 (Bad Request)']);
    } finally {
      await operator.close();
      await viewer.close();
      standalone.kill('SIGTERM');
      await standalone.exitWithin(30_000);
    }
  }, 120_000);
});
