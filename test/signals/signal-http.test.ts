// POST /signals/:key on a real triggerer process: off without a token, 127.0.0.1 by default, the
// bearer token required, bad input refused with its code, the token never printed.
import { afterAll, describe, expect, it } from 'vitest';
import { listSignals } from '../../src/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { spawnDeferflow, spawnTriggerer, stopCleanly } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';
import { waitFor } from '../support/fixtures.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const TOKEN = 's3cret-token-0123456789abcdef';

describe.each(testDialects)('the signal endpoint on %s', (dialect) => {
  it('sends a signal for the right bearer token only, refuses bad keys and bodies with their codes, and never prints the token', async () => {
    const db = await scratch.database(dialect);
    const triggerer = spawnTriggerer(['--db', db.url, '--signal-http-port', '0'], { DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN });
    const listening = await triggerer.waitForLine((line) => typeof line.port === 'number', 20_000);
    expect(listening.host).toBe('127.0.0.1');
    const url = (key: string) => `http://127.0.0.1:${listening.port}/signals/${key}`;
    const post = async (key: string, body: string, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) => {
      const response = await fetch(url(key), { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
      return { status: response.status, body: await response.json() };
    };
    expect(await post('orders.loaded', '{"rows": 7}', {})).toMatchObject({ status: 401 });
    expect(await post('orders.loaded', '{"rows": 7}', { authorization: 'Bearer wrong-token-0123456789abcdef' })).toMatchObject({ status: 401 });
    expect(await post('orders.loaded', '{"rows": 7}', { authorization: `Basic ${TOKEN}` })).toMatchObject({ status: 401 });
    expect(await listSignals(db, 'orders.loaded')).toEqual([]);

    expect(await post('orders.loaded', '{"rows": 7}')).toEqual({ status: 201, body: { key: 'orders.loaded', version: 1 } });
    expect(await post(encodeURIComponent('dataset/sales:2026-11-23'), '')).toEqual({ status: 201, body: { key: 'dataset/sales:2026-11-23', version: 1 } });
    expect((await listSignals(db, 'orders.loaded')).map((s) => s.value)).toEqual([{ rows: 7 }]);

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
    const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--log-level', 'info'], {
      DEFERFLOW_SIGNAL_HTTP_TOKEN: TOKEN,
      DEFERFLOW_SIGNAL_HTTP_PORT: '0',
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
    const plain = spawnTriggerer(['--db', db.url, '--signal-http-port', '0']);
    await plain.waitForJob(20_000);
    await stopCleanly([plain]);
    expect(plain.lines.some((line) => typeof line.port === 'number')).toBe(false);
    const short = spawnTriggerer(['--db', db.url], { DEFERFLOW_SIGNAL_HTTP_TOKEN: 'short' });
    expect((await short.exit).code).toBe(2);
    expect(short.stderr.join('\n')).toContain('signal-http-token: must be 16 characters or more');
  }, 60_000);
});
