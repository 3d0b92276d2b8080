// `deferflow web` as an operator runs it: on 127.0.0.1 it asks for nothing; anywhere else it
// refuses to start without a token, and with one it asks for it on the pages (not on /health
// or /metrics, which probes and Prometheus read).
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
});
