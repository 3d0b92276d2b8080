/**
 * Human input as a user runs it, with real processes on one dialect (its storage is tested on both in test/unit/human-input.test.ts): a `deferflow standalone`
 * (task code in runner processes) runs a DAG whose tasks ask people. Each question is answered
 * the way a person or a system would: a signed link sent by the task's onAwaitingInput hook
 * (posted as a browser's form would, refused when tampered, answered once), the status page's
 * form in Chromium, the HTTP API with the web token, the CLI; timeouts with and without defaults;
 * a hook that answers before the try begins to wait; a branch choice skipping the branch not
 * chosen; and a cleared task instance whose link is refused from then on. While a question
 * waits, the task instance holds no worker slot and no trigger row.
 */
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { PACKAGE_ENTRY, REPO_ROOT, RUNNER_PROCESSES, spawnDeferflow } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';
import { sharedBrowser } from '../support/shared-browser.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();
const WEB_TOKEN = 'a-web-token-for-the-test-0123456789';
const OPERATOR_TOKEN = 'an-operator-token-for-the-test-9876543210';

const dagSource = (notices: string) => `
import { appendFileSync } from 'node:fs';
import { ApprovalOperator, BaseOperator, BranchChoiceOperator, Dag, InputOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
const notify = (notice) =>
  appendFileSync(${JSON.stringify(notices)}, JSON.stringify({ task: notice.taskInstance.taskId, link: notice.link, subject: notice.question.subject, expiresAt: notice.expiresAt }) + '\\n');
class Done extends BaseOperator { execute() { return this.taskId; } }
class AskNoDefaults extends BaseOperator {
  async execute(context) {
    return this.awaitInput(context, { subject: 'Pick a number', fields: [{ name: 'n', type: 'number' }], timeout: 1, method: 'got' });
  }
  got(context, response) { return response; }
}
class AnswersItself extends BaseOperator {
  async execute(context) {
    return this.awaitInput(context, {
      subject: 'Proceed?', options: ['yes', 'no'], method: 'got', kwargs: { asked: 'itself' },
      // Answers through its own link before the try has begun to wait: the response must not be lost.
      onAwaitingInput: async (notice) => {
        const reply = await fetch(notice.link, { method: 'POST', body: new URLSearchParams({ choose: 'yes', by: 'the hook' }) });
        context.log.info({ status: reply.status }, 'answered by the hook');
      },
    });
  }
  got(context, response, kwargs) { return { response, kwargs }; }
}
const approve = new ApprovalOperator({ taskId: 'approve', subject: 'Ship release 1.2?', body: 'All checks passed.', onAwaitingInput: notify });
const choose = new BranchChoiceOperator({ taskId: 'choose', subject: 'Where to?', branches: ['deploy', 'rollback'], onAwaitingInput: notify });
const deploy = new Done({ taskId: 'deploy' });
const rollback = new Done({ taskId: 'rollback' });
const join = new Done({ taskId: 'join', triggerRule: 'none_failed' });
const form = new InputOperator({
  taskId: 'form', subject: 'Settings', timeout: 1, submitDefaultsOnTimeout: true,
  fields: [{ name: 'replicas', type: 'number', default: 3 }, { name: 'region', type: 'choice', choices: ['eu', 'us'], default: 'eu' }],
});
const viaApi = new InputOperator({ taskId: 'via_api', subject: 'Ticket?', fields: [{ name: 'ticket', type: 'text' }, { name: 'urgent', type: 'boolean', required: false }] });
export const dag = new Dag({ dagId: 'approvals' }).add(approve, choose, deploy, rollback, join, form, viaApi,
  new AskNoDefaults({ taskId: 'no_defaults' }), new AnswersItself({ taskId: 'answers_itself' }));
approve.before(choose);
choose.before([deploy, rollback]);
deploy.before(join);
rollback.before(join);
`;

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe.each(oneDialect)('human input on %s', (dialect) => {
  it('questions answered by signed link, the status page in Chromium, the HTTP API and the CLI; timeouts; branches; no slot and no trigger while waiting', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('human-input');
    const notices = path.join(dags, 'notices.jsonl');
    writeFileSync(path.join(dags, 'approvals.mjs'), dagSource(notices));
    const port = await freePort();
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'approvals', '--http-port', String(port)], {
      ...RUNNER_PROCESSES,
      DEFERFLOW_WEB_TOKEN: WEB_TOKEN,
      DEFERFLOW_WEB_OPERATOR_TOKEN: OPERATOR_TOKEN,
    });
    const cli = async (args: string[]) => {
      const proc = spawnDeferflow([...args, '--db', db.url]);
      const exit = await proc.exitWithin();
      return { code: exit.code, out: [...proc.text, ...proc.stderr].join('\n') };
    };
    const ti = (taskId: string) =>
      db.db
        .selectFrom('task_instance')
        .select(['id', 'state', 'try_number', 'worker_job_id', 'trigger_id', 'return_value', 'run_id'])
        .where('task_id', '=', taskId)
        .executeTakeFirstOrThrow();
    // Undefined until the DAG run (and its task instances) exists.
    const stateOf = async (taskId: string) =>
      (await db.db.selectFrom('task_instance').select('state').where('dag_id', '=', 'approvals').where('task_id', '=', taskId).executeTakeFirst())?.state;
    try {
      const base = await standalone.waitForStatusPage();
      // The link leads to this standalone's own status page (its fixed --http-port).
      expect(base).toBe(`http://127.0.0.1:${port}`);

      // approve asks: no slot, no trigger row, and its hook has the link.
      await waitFor(async () => (await stateOf('approve')) === 'awaiting_input', { timeoutMs: 30_000, what: 'approve awaiting input' });
      const approve = await ti('approve');
      expect(approve.worker_job_id).toBeNull();
      expect(approve.trigger_id).toBeNull();
      await waitFor(() => existsSync(notices) && readFileSync(notices, 'utf8').includes('"approve"'), {
        timeoutMs: 10_000,
        what: 'the link notice of approve',
      });
      const notice = readFileSync(notices, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { task: string; link: string; subject: string; expiresAt: string | null })
        .find((line) => line.task === 'approve')!;
      expect(notice.subject).toBe('Ship release 1.2?');
      expect(notice.expiresAt).toBeNull();
      expect(notice.link.startsWith(`${base}/input/`)).toBe(true);

      // The link opens the question without any login (the status page itself wants the token).
      const page = await fetch(notice.link);
      expect(page.status).toBe(200);
      const pageText = await page.text();
      expect(pageText).toContain('Ship release 1.2?');
      expect(pageText).toContain('All checks passed.');
      expect((await fetch(`${base}/awaiting`)).status).toBe(401);

      // A tampered link is refused and records nothing.
      const tampered = notice.link.replace(/.$/, (last) => (last === 'A' ? 'B' : 'A'));
      const refused = await fetch(tampered, { method: 'POST', body: new URLSearchParams({ choose: 'approve', by: 'mallory' }) });
      expect(refused.status).toBe(403);
      expect(await refused.text()).toContain('DF_INPUT_LINK_INVALID');
      expect(await stateOf('approve')).toBe('awaiting_input');

      // An answer the question does not offer is refused (400), the form shown again.
      const wrong = await fetch(notice.link, { method: 'POST', body: new URLSearchParams({ choose: 'maybe', by: 'alice' }) });
      expect(wrong.status).toBe(400);
      expect(await wrong.text()).toContain('not offered');

      // The link answers once: the first response wins, a second one is told who answered.
      const answered = await fetch(notice.link, { method: 'POST', body: new URLSearchParams({ choose: 'approve', by: 'alice' }) });
      expect(answered.status).toBe(200);
      const again = await fetch(notice.link, { method: 'POST', body: new URLSearchParams({ choose: 'reject', by: 'bob' }) });
      expect(again.status).toBe(409);
      expect(await again.text()).toContain('alice');
      await waitFor(async () => (await stateOf('approve')) === 'success', { timeoutMs: 30_000, what: 'approve resumed and succeeded' });
      const approved = JSON.parse((await ti('approve')).return_value!) as { chosen: string[]; by: string; source: string };
      expect(approved).toMatchObject({ chosen: ['approve'], by: 'alice', source: 'link' });

      // choose, answered on the status page's form in Chromium by an operator (signed in with
      // the operator token, her name as the user name): deploy runs, rollback is skipped. A
      // viewer sees the question and no form.
      await waitFor(async () => (await stateOf('choose')) === 'awaiting_input', { timeoutMs: 30_000, what: 'choose awaiting input' });
      const viewer = await browser().newContext({ extraHTTPHeaders: { authorization: `Bearer ${WEB_TOKEN}` } });
      try {
        const viewerPage = await viewer.newPage();
        await viewerPage.goto(`${base}/ti/${(await ti('choose')).id}/input`);
        expect(await viewerPage.locator('h1').textContent()).toBe('Where to?');
        expect(await viewerPage.locator('#needs-operator').count()).toBe(1);
        expect(await viewerPage.locator('#respond').count()).toBe(0);
      } finally {
        await viewer.close();
      }
      const context = await browser().newContext({ httpCredentials: { username: 'carol', password: OPERATOR_TOKEN } });
      const browserPage = await context.newPage();
      try {
        await browserPage.goto(`${base}/awaiting`);
        const row = browserPage.locator('#awaiting tr', { hasText: 'Where to?' });
        await row.waitFor({ timeout: 10_000 });
        await row.locator('a', { hasText: 'Where to?' }).click();
        await browserPage.locator('#respond').waitFor();
        await browserPage.click('button[value="deploy"]');
        await browserPage.locator('#done').waitFor({ timeout: 10_000 });
        expect(await browserPage.locator('#done').textContent()).toBe('respond by carol: answered: deploy');
      } finally {
        await context.close();
      }
      await waitFor(async () => (await stateOf('join')) === 'success', { timeoutMs: 30_000, what: 'the join after the branch chosen' });
      expect(await stateOf('deploy')).toBe('success');
      expect(await stateOf('rollback')).toBe('skipped');
      expect(JSON.parse((await ti('choose')).return_value!)).toMatchObject({ chosen: ['deploy'], by: 'carol', source: 'page' });

      // via_api: the HTTP API wants the operator token as a bearer (the viewer's is refused); a bad
      // field is refused; then the CLI is too late.
      await waitFor(async () => (await stateOf('via_api')) === 'awaiting_input', { timeoutMs: 30_000, what: 'via_api awaiting input' });
      const viaApi = await ti('via_api');
      const api = (body: unknown, token = OPERATOR_TOKEN) =>
        fetch(`${base}/api/task-instances/${viaApi.id}/input`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
      expect((await api({ values: { ticket: 'T-1' }, by: 'dave' }, 'wrong-token-wrong-token')).status).toBe(401);
      const asViewer = await api({ values: { ticket: 'T-1' }, by: 'dave' }, WEB_TOKEN);
      expect(asViewer.status).toBe(403);
      expect(await asViewer.json()).toEqual({ error: 'answering is an operator action: send the operator token, not the viewer token' });
      const badField = await api({ values: { ticket: 42 }, by: 'dave' });
      expect(badField.status).toBe(400);
      expect(await badField.json()).toMatchObject({ code: 'DF_INVALID_INPUT_RESPONSE' });
      const viaHttp = await api({ values: { ticket: 'T-1' }, by: 'dave' });
      expect(viaHttp.status).toBe(200);
      expect(await viaHttp.json()).toMatchObject({ values: { ticket: 'T-1' }, by: 'dave', source: 'http' });
      const late = await cli(['tasks', 'respond', '--run', viaApi.run_id, '--task', 'via_api', '--field', 'ticket=T-2', '--by', 'erin']);
      expect(late.code).toBe(2);
      expect(late.out).toContain('DF_INPUT_ALREADY_GIVEN');
      expect(late.out).toContain('dave');
      await waitFor(async () => (await stateOf('via_api')) === 'success', { timeoutMs: 30_000, what: 'via_api resumed' });

      // The timeouts: defaults answer at the deadline; with none, the task fails.
      await waitFor(async () => (await stateOf('form')) === 'success', { timeoutMs: 30_000, what: 'form answered by its defaults' });
      expect(JSON.parse((await ti('form')).return_value!)).toMatchObject({ values: { replicas: 3, region: 'eu' }, by: 'timeout', source: 'timeout' });
      const formInput = await db.db
        .selectFrom('task_input')
        .select(['timeout_at', 'responded_at'])
        .where('task_instance_id', '=', (await ti('form')).id)
        .executeTakeFirstOrThrow();
      // Answered at the deadline, not before it (how soon after is the benchmark's: bench:waits).
      expect(new Date(formInput.responded_at!).getTime()).toBeGreaterThanOrEqual(new Date(formInput.timeout_at!).getTime());
      await waitFor(async () => (await stateOf('no_defaults')) === 'failed', { timeoutMs: 30_000, what: 'no_defaults failed at its timeout' });
      const listed = JSON.parse((await cli(['tasks', 'list', '--run', approve.run_id, '--json'])).out) as {
        task_id: string;
        error: { code: string; error: string } | null;
      }[];
      expect(listed.find((row) => row.task_id === 'no_defaults')?.error).toMatchObject({
        code: 'DF_INPUT_TIMEOUT',
        error: expect.stringContaining('Pick a number'),
      });

      // Answered through its own link while its try still ran: resumed, nothing lost.
      await waitFor(async () => (await stateOf('answers_itself')) === 'success', { timeoutMs: 30_000, what: 'answers_itself resumed' });
      expect(JSON.parse((await ti('answers_itself')).return_value!)).toMatchObject({
        response: { chosen: ['yes'], by: 'the hook' },
        kwargs: { asked: 'itself' },
      });

      // Each response is in the audit log: who, how it came, from where.
      const responses = await db.db
        .selectFrom('audit_log')
        .select(['actor', 'source', 'address', 'details'])
        .where('action', '=', 'respond')
        .orderBy('id')
        .execute();
      expect(responses.map((entry) => [entry.actor, entry.source, JSON.parse(entry.details).via]).sort()).toEqual([
        ['alice', 'link', 'link'],
        ['carol', 'web', 'page'],
        ['dave', 'web', 'http'],
        ['the hook', 'link', 'link'],
      ]);
      expect(responses.every((entry) => entry.address?.includes('127.0.0.1'))).toBe(true);

      // `tasks input` shows who answered; a cleared task instance's old link is refused (410).
      const shown = await cli(['tasks', 'input', '--run', approve.run_id, '--task', 'approve']);
      expect(shown.code).toBe(0);
      expect(shown.out).toContain('answered by alice');
      expect((await cli(['tasks', 'clear', '--run', approve.run_id, '--task', 'approve'])).code).toBe(0);
      const stale = await fetch(notice.link);
      expect(stale.status).toBe(410);
      expect(await stale.text()).toContain('no longer valid');
      // Nothing waits on a trigger anywhere in this DAG.
      expect(await db.db.selectFrom('trigger').select('id').execute()).toEqual([]);
    } finally {
      standalone.kill('SIGTERM');
      await standalone.exitWithin();
    }
  }, 180_000);

  it('the release example posts each question to its webhook; answered through the links, it rolls back and announces', async () => {
    const db = await scratch.database(dialect);
    const received: { text: string; link: string }[] = [];
    const webhook = http.createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        received.push(JSON.parse(body) as { text: string; link: string });
        response.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => webhook.listen(0, '127.0.0.1', resolve));
    const port = await freePort();
    const standalone = spawnDeferflow(
      ['standalone', '--db', db.url, '--dags', path.join(REPO_ROOT, 'examples/dags'), '--trigger-dag', 'release_approval', '--http-port', String(port)],
      { RELEASE_APPROVAL_WEBHOOK: `http://127.0.0.1:${(webhook.address() as net.AddressInfo).port}/hook` },
    );
    const stateOf = async (taskId: string) =>
      (await db.db.selectFrom('task_instance').select('state').where('dag_id', '=', 'release_approval').where('task_id', '=', taskId).executeTakeFirst())
        ?.state;
    const answer = async (index: number, choose: string) => {
      await waitFor(() => received.length > index, { timeoutMs: 30_000, what: `webhook message ${index + 1}` });
      const reply = await fetch(received[index]!.link, { method: 'POST', body: new URLSearchParams({ choose, by: 'release manager' }) });
      expect(reply.status).toBe(200);
    };
    try {
      await answer(0, 'approve');
      expect(received[0]!.text).toContain('Ship it?');
      await answer(1, 'rollback');
      await waitFor(async () => (await stateOf('announce')) === 'success', { timeoutMs: 30_000, what: 'the release announced' });
      expect(await stateOf('rollback')).toBe('success');
      expect(await stateOf('deploy')).toBe('skipped');
    } finally {
      standalone.kill('SIGTERM');
      await standalone.exitWithin();
      await new Promise<void>((resolve) => webhook.close(() => resolve()));
    }
  }, 120_000);
});
