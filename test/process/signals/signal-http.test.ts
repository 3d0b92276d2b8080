// POST /signals/:key on a real triggerer process: served on the process's one HTTP endpoint beside
// /metrics and /health, off without a token, 127.0.0.1 by default, the bearer token required, bad
// input refused with its code, the token never printed; the reply says who the signal reached.
import os from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { createTaskInstance, deferTaskInstance, listSignals, readTaskInstance, SignalTrigger, TaskDeferred } from '../../../src/index.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { spawnDeferflow, spawnTriggerer, stopCleanly } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { waitFor } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const TOKEN = 's3cret-token-0123456789abcdef';

describe.each(testDialects)('the signal endpoint on %s', (dialect) => {
  it('sends a signal for the right bearer token only, refuses bad keys and bodies with their codes, and never prints the token', async () => {
    const db = await scratch.database(dialect);
    const triggerer = spawnTriggerer(['--db', db.url, '--http-port', '0'], { DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN });
    const listening = await triggerer.waitForLine((line) => typeof line.port === 'number', 20_000);
    expect(listening.host).toBe('127.0.0.1');
    await triggerer.waitForLine((line) => String(line.msg).startsWith('signal endpoint: POST http://127.0.0.1:'), 20_000);
    // One port: /metrics and /health beside /signals.
    await triggerer.waitForJob(20_000);
    await waitFor(async () => (await fetch(`http://127.0.0.1:${listening.port}/health`)).status === 200, { what: '/health answering 200' });
    expect(await (await fetch(`http://127.0.0.1:${listening.port}/metrics`)).text()).toContain('deferflow_');
    const url = (key: string) => `http://127.0.0.1:${listening.port}/signals/${key}`;
    const post = async (key: string, body: string, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) => {
      const response = await fetch(url(key), { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
      return { status: response.status, body: await response.json() };
    };
    expect(await post('orders.loaded', '{"rows": 7}', {})).toMatchObject({ status: 401 });
    expect(await post('orders.loaded', '{"rows": 7}', { authorization: 'Bearer wrong-token-0123456789abcdef' })).toMatchObject({ status: 401 });
    expect(await post('orders.loaded', '{"rows": 7}', { authorization: `Basic ${TOKEN}` })).toMatchObject({ status: 401 });
    expect(await listSignals(db, 'orders.loaded')).toEqual([]);

    const nobody = (key: string, version: number) => ({
      key,
      version,
      woke: 0,
      signal_actions: 0,
      scheduled_dags: [],
      warning: `no task waits on signal key ${key} and no DAG is scheduled on it; it is stored (version ${version}) for waits to come`,
    });
    expect(await post('orders.loaded', '{"rows": 7}')).toEqual({ status: 201, body: nobody('orders.loaded', 1) });
    expect(await post(encodeURIComponent('dataset/sales:2026-11-23'), '')).toEqual({ status: 201, body: nobody('dataset/sales:2026-11-23', 1) });
    expect((await listSignals(db, 'orders.loaded')).map((s) => s.value)).toEqual([{ rows: 7 }]);

    // A task waiting on newcomer.go: a send on a typo of it is stored, and said to reach nobody, with the key meant.
    const waiting = await createTaskInstance(db, { dagId: 'newcomers', taskId: 'greet', runId: 'r1' });
    await deferTaskInstance(db, waiting, new TaskDeferred({ trigger: new SignalTrigger({ key: 'newcomer.go', sinceVersion: 0 }), method: 'greet' }));
    const typo = spawnDeferflow(['signal', 'send', 'newcomer.og', '{"name": "ada"}', '--db', db.url]);
    expect((await typo.exit).code).toBe(0);
    expect(typo.text).toEqual(['1']);
    expect(typo.stderr).toEqual([
      'warning: no task waits on signal key newcomer.og and no DAG is scheduled on it; it is stored (version 1) for waits to come. Did you mean newcomer.go?',
    ]);
    expect((await listSignals(db, 'newcomer.og')).map((s) => s.value)).toEqual([{ name: 'ada' }]);
    // The right key over HTTP: the reply counts the wait it fires.
    expect(await post('newcomer.go', '{"name": "ada"}')).toEqual({
      status: 201,
      body: { key: 'newcomer.go', version: 1, woke: 1, signal_actions: 0, scheduled_dags: [] },
    });
    await waitFor(async () => (await readTaskInstance(db, waiting))?.state === 'scheduled', { what: 'the wait fired' });
    // From the CLI, a key something waits on: nothing said.
    const next = await createTaskInstance(db, { dagId: 'newcomers', taskId: 'greet', runId: 'r2' });
    await deferTaskInstance(db, next, new TaskDeferred({ trigger: new SignalTrigger({ key: 'newcomer.go', sinceVersion: 1 }), method: 'greet' }));
    const heard = spawnDeferflow(['signal', 'send', 'newcomer.go', '--db', db.url]);
    expect((await heard.exit).code).toBe(0);
    expect(heard.stderr).toEqual([]);
    // Who sent each version is kept with it: the HTTP client's address, the CLI's user and host.
    const senders = await db.db.selectFrom('signal').select(['version', 'sent_by']).where('key', '=', 'newcomer.go').orderBy('version').execute();
    expect(senders.map((row) => row.sent_by)).toEqual([
      expect.stringMatching(/^POST \/signals \((::ffff:)?127\.0\.0\.1\)$/),
      `${os.userInfo().username} (cli, ${os.hostname()})`,
    ]);

    expect(await post('has%20space', '1')).toMatchObject({ status: 400, body: { code: 'DF_INVALID_SIGNAL' } });
    expect(await post('orders.loaded', 'not json')).toMatchObject({ status: 400, body: { code: 'DF_NOT_JSON' } });
    expect(await post('orders.loaded', JSON.stringify('x'.repeat(70_000)))).toMatchObject({ status: 413, body: { code: 'DF_INVALID_SIGNAL' } });
    const get = await fetch(url('orders.loaded'), { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(get.status).toBe(405);
    expect((await fetch(`http://127.0.0.1:${listening.port}/elsewhere`, { method: 'POST' })).status).toBe(404);
    expect((await listSignals(db, 'orders.loaded')).map((s) => s.version)).toEqual([1]);

    await stopCleanly([triggerer]);
    expect([...triggerer.text, ...triggerer.stderr].join('\n')).not.toContain(TOKEN);
  }, 60_000);

  it('is served by standalone too, from the environment variable', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('signal-http-standalone');
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--log-level', 'info', '--http-port', '0'], {
      DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN,
    });
    // Standalone logs to stderr (stdout shows progress).
    const listening = await waitFor(
      () =>
        standalone.stderr
          .flatMap((line) => {
            try {
              return [JSON.parse(line) as { port?: unknown }];
            } catch {
              return [];
            }
          })
          .find((line) => typeof line.port === 'number'),
      { what: 'the endpoint listening', timeoutMs: 20_000 },
    );
    const response = await fetch(`http://127.0.0.1:${listening.port}/signals/standalone.ready`, {
      method: 'POST',
      body: '"up"',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(response.status).toBe(201);
    expect((await listSignals(db, 'standalone.ready')).map((s) => s.value)).toEqual(['up']);
    await stopCleanly([standalone]);
  }, 60_000);

  it('is off without a token, and a short token is refused at start, naming the option', async () => {
    const db = await scratch.database(dialect);
    const plain = spawnTriggerer(['--db', db.url, '--http-port', '0']);
    const listening = await plain.waitForLine((line) => typeof line.port === 'number', 20_000);
    await plain.waitForJob(20_000);
    expect((await fetch(`http://127.0.0.1:${listening.port}/signals/orders.loaded`, { method: 'POST', body: '1' })).status).toBe(404);
    await stopCleanly([plain]);
    expect(plain.lines.some((line) => String(line.msg).startsWith('signal endpoint'))).toBe(false);
    const short = spawnTriggerer(['--db', db.url], { DEFERFLOW_SIGNAL_HTTP_TOKEN: 'short' });
    expect((await short.exit).code).toBe(2);
    expect(short.stderr.join('\n')).toContain('signal-http-token: must be 16 characters or more');
  }, 60_000);
});

describe('one HTTP endpoint per process', () => {
  it('two triggerers on one host with the signal token exported both run: the second is told the port is taken; with --http-port 0 each serves its own', async () => {
    const db = await scratch.database('sqlite');
    // The token's default port (8795), as a deployment that exported the token gets it.
    const env = { DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN, DEFERFLOW_HTTP_PORT: '' };
    const first = spawnTriggerer(['--db', db.url, '--log-level', 'info'], env);
    await first.waitForJob(20_000);
    const second = spawnTriggerer(['--db', db.url, '--log-level', 'info'], env);
    await second.waitForJob(20_000);
    const taken = (proc: typeof first) => proc.lines.some((line) => String(line.msg).includes('give each process its own --http-port (0: any free one)'));
    // Both run; at least the second was told (8795 may be held by something else too).
    expect(taken(second)).toBe(true);
    await stopCleanly([first, second]);

    const own = [0, 1].map(() => spawnTriggerer(['--db', db.url, '--http-port', '0'], { DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN }));
    const ports = await Promise.all(own.map(async (proc) => Number((await proc.waitForLine((line) => typeof line.port === 'number', 20_000)).port)));
    expect(new Set(ports).size).toBe(2);
    for (const [i, port] of ports.entries()) {
      const response = await fetch(`http://127.0.0.1:${port}/signals/own.port`, {
        method: 'POST',
        body: String(i),
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(response.status).toBe(201);
    }
    expect((await listSignals(db, 'own.port')).map((signal) => signal.value)).toEqual([0, 1]);
    await stopCleanly(own);
  }, 60_000);
});
