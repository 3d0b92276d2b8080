// `deferflow web` as an operator runs it: on 127.0.0.1 it asks for nothing; anywhere else it
// refuses to start without a token, and with one it asks for it on the pages (not on /health
// or /metrics, which probes and Prometheus read). The operator role has a token of its own.
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases } from '../../support/databases.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { spawnDeferflow, type TriggererProcess, stopCleanly } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/** The page's address; a server bound to every interface is reached on 127.0.0.1. */
const pageBase = async (proc: TriggererProcess) => (await proc.waitForStatusPage()).replace('0.0.0.0', '127.0.0.1');

describe('deferflow web', () => {
  it('serves the pages on 127.0.0.1 without a token; elsewhere it needs one, asked as bearer or basic auth', async () => {
    const db = await scratch.database('sqlite');
    const open = spawnDeferflow(['web', '--db', db.url, '--http-port', '0']);
    const base = await pageBase(open);
    for (const path of ['/', '/deferred', '/triggers', '/daemons', '/triggerers', '/dags']) {
      const response = await fetch(`${base}${path}`);
      expect(response.status, path).toBe(200);
      expect(await response.text(), path).toContain('<header><b>deferflow</b>');
    }
    expect((await fetch(`${base}/dags/nope`)).status).toBe(404);
    expect((await fetch(`${base}/ti/999/log`)).status).toBe(404);
    await stopCleanly([open]);

    const refused = spawnDeferflow(['web', '--db', db.url, '--http-host', '0.0.0.0', '--http-port', '0']);
    expect((await refused.exit).code).toBe(2);
    expect(refused.stderr.join('\n')).toContain('web-token: the status page would be served on 0.0.0.0');

    const token = 'a-web-token-of-24-chars!';
    const guarded = spawnDeferflow(['web', '--db', db.url, '--http-host', '0.0.0.0', '--http-port', '0'], { DEFERFLOW_WEB_TOKEN: token });
    const guardedBase = await pageBase(guarded);
    const asked = await fetch(`${guardedBase}/deferred`);
    expect(asked.status).toBe(401);
    expect(asked.headers.get('www-authenticate')).toContain('Basic');
    expect((await fetch(`${guardedBase}/deferred`, { headers: { authorization: 'Bearer wrong-token-wrong-token' } })).status).toBe(401);
    expect((await fetch(`${guardedBase}/deferred`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const basic = `Basic ${Buffer.from(`anyone:${token}`).toString('base64')}`;
    expect((await fetch(`${guardedBase}/deferred`, { headers: { authorization: basic } })).status).toBe(200);
    expect((await fetch(`${guardedBase}/health`)).status).toBe(200);
    expect((await fetch(`${guardedBase}/metrics`)).status).toBe(200);
    expect(guarded.text.join('\n') + guarded.stderr.join('\n')).not.toContain(token);
    await stopCleanly([guarded]);
  });

  it('the operator role needs its own token: without one the page is read-only; the viewer token does not sign in; one token for both is refused', async () => {
    const db = await scratch.database('sqlite');
    const viewerToken = 'a-viewer-token-of-24-chars';
    const operatorToken = 'an-operator-token-of-24-chars';
    const same = spawnDeferflow(['web', '--db', db.url, '--http-port', '0'], { DEFERFLOW_WEB_TOKEN: viewerToken, DEFERFLOW_WEB_OPERATOR_TOKEN: viewerToken });
    expect((await same.exit).code).toBe(2);
    expect(same.stderr.join('\n')).toContain('web-operator-token: is the same as the web token');

    // Read-only: a post is refused, naming the variable that allows actions; signing in too.
    const readOnly = spawnDeferflow(['web', '--db', db.url, '--http-port', '0']);
    const readOnlyBase = await pageBase(readOnly);
    const posted = await fetch(`${readOnlyBase}/dags/etl/pause`, { method: 'POST', body: 'csrf=x' });
    expect(posted.status).toBe(403);
    expect(await posted.text()).toContain('DEFERFLOW_WEB_OPERATOR_TOKEN');
    expect((await fetch(`${readOnlyBase}/sign-in`)).status).toBe(401);
    await stopCleanly([readOnly]);

    // Beyond this machine: nobody views without a token; each token makes its role.
    const guarded = spawnDeferflow(['web', '--db', db.url, '--http-host', '0.0.0.0', '--http-port', '0'], {
      DEFERFLOW_WEB_TOKEN: viewerToken,
      DEFERFLOW_WEB_OPERATOR_TOKEN: operatorToken,
    });
    const base = await pageBase(guarded);
    const as = (name: string, token: string) => ({ authorization: `Basic ${Buffer.from(`${name}:${token}`).toString('base64')}` });
    expect((await fetch(`${base}/audit`)).status).toBe(401);
    const viewed = await fetch(`${base}/audit`, { headers: as('victor', viewerToken) });
    expect(viewed.status).toBe(200);
    expect(await viewed.text()).toContain('viewer · <a href="/sign-in">sign in</a>');
    expect((await fetch(`${base}/sign-in`, { headers: as('victor', viewerToken) })).status).toBe(401);
    const signedIn = await fetch(`${base}/sign-in`, { headers: as('olga', operatorToken), redirect: 'manual' });
    expect(signedIn.status).toBe(303);
    const operatorPage = await (await fetch(`${base}/signals`, { headers: as('olga', operatorToken) })).text();
    expect(operatorPage).toContain('operator <b>olga</b>');
    const csrf = /name="csrf" value="([^"]+)"/.exec(operatorPage)![1]!;
    // The viewer token with the operator's CSRF token is still a viewer.
    const byViewer = await fetch(`${base}/signals`, { method: 'POST', headers: as('victor', viewerToken), body: new URLSearchParams({ key: 'k', csrf }) });
    expect(byViewer.status).toBe(403);
    const byOperator = await fetch(`${base}/signals`, {
      method: 'POST',
      headers: as('olga', operatorToken),
      body: new URLSearchParams({ key: 'k', csrf }),
      redirect: 'manual',
    });
    expect(byOperator.status).toBe(303);
    expect(byOperator.headers.get('location')).toMatch(/^\/signals\?done=\d+$/);
    const audit = await db.db.selectFrom('audit_log').selectAll().execute();
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ actor: 'olga', source: 'web', action: 'signal', address: expect.stringMatching(/127\.0\.0\.1/) });
    await stopCleanly([guarded]);
  });
});
