import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpSensor, HttpTrigger } from '../../../triggers/index.ts';
import { waitFor } from '../../support/fixtures.ts';

/** A local server whose answers the test sets: status and body, counting requests. */
async function server() {
  let answer = { status: 503, body: '' };
  let requests = 0;
  const srv = http.createServer((_request, response) => {
    requests++;
    response.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/status`,
    answer: (status: number, body = '') => (answer = { status, body }),
    requests: () => requests,
    close: () => new Promise<void>((resolve) => srv.close(() => resolve())),
  };
}

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

/** The trigger's first event, run outside a triggerer, or 'timeout'. */
async function eventWithin(trigger: HttpTrigger, ms: number) {
  const controller = new AbortController();
  const next = trigger.run(controller.signal).next();
  const outcome = await Promise.race([next.then((result) => result.value), new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), ms))]);
  if (outcome === 'timeout') {
    controller.abort();
    await next.catch(() => undefined);
  }
  return outcome;
}

describe('HttpTrigger', () => {
  it('fires on an expected status with the JSON field asked for, not before', async () => {
    const srv = await server();
    open.push(srv);
    const trigger = new HttpTrigger({ url: srv.url, pollInterval: 0.05, jsonPath: 'job.state', jsonEquals: 'done' });
    expect(await eventWithin(trigger, 300)).toBe('timeout'); // 503
    srv.answer(200, JSON.stringify({ job: { state: 'running' } }));
    expect(await eventWithin(trigger, 300)).toBe('timeout'); // 200, but not done
    srv.answer(200, JSON.stringify({ job: { state: 'done' } }));
    expect(await eventWithin(trigger, 2_000)).toMatchObject({ payload: { url: srv.url, status: 200 } });
  });

  it('matches a body by text, and retries a refused connection with backoff before counting it as not yet', async () => {
    const srv = await server();
    open.push(srv);
    srv.answer(204);
    expect(await eventWithin(new HttpTrigger({ url: srv.url, pollInterval: 0.05, expectedStatus: [204] }), 2_000)).toMatchObject({ payload: { status: 204 } });
    srv.answer(200, 'report ready at 09:00');
    expect(await eventWithin(new HttpTrigger({ url: srv.url, pollInterval: 0.05, bodyContains: 'ready' }), 2_000)).toMatchObject({ payload: { status: 200 } });
    // A server that drops every connection: one check makes its three attempts (0.5 s, then 1 s apart), then waits for the next.
    let connections = 0;
    const dropping = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => dropping.listen(0, '127.0.0.1', resolve));
    open.push({ close: () => new Promise<void>((resolve) => dropping.close(() => resolve())) });
    const url = `http://127.0.0.1:${(dropping.address() as AddressInfo).port}/`;
    const controller = new AbortController();
    const pending = new HttpTrigger({ url, pollInterval: 3, connectAttempts: 3 }).run(controller.signal).next();
    const startedAt = Date.now();
    await waitFor(() => connections >= 3, { what: 'three attempts', timeoutMs: 10_000 });
    // The backoff (0.5 s + 1 s) came before the third; the next check is 3 s after it.
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1_400);
    expect(connections).toBe(3);
    controller.abort();
    await pending.catch(() => undefined);
  });

  it('sends a named connection’s Basic auth and __extra__ headers, resolving a path against its URL, and stores only its name', async () => {
    const seen: http.IncomingHttpHeaders[] = [];
    const paths: string[] = [];
    const srv = http.createServer((request, response) => {
      seen.push(request.headers);
      paths.push(request.url!);
      response.writeHead(request.headers['x-api-key'] === 'k3y' ? 200 : 401).end();
    });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    open.push({ close: () => new Promise<void>((resolve) => srv.close(() => resolve())) });
    const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    process.env.DEFERFLOW_CONN_JOBS_API = `http://robot:p%40ss@${base.slice(7)}/v1/?__extra__=${encodeURIComponent(JSON.stringify({ 'X-Api-Key': 'k3y', 'X-Trace': 'conn' }))}`;
    try {
      const trigger = new HttpTrigger({ url: 'jobs/7', connection: 'jobs_api', headers: { 'X-Trace': 'kwarg' }, pollInterval: 0.05 });
      expect(await eventWithin(trigger, 2_000)).toMatchObject({ payload: { url: `${base}/v1/jobs/7`, status: 200 } });
      expect(paths).toEqual(['/v1/jobs/7']);
      expect(seen[0]).toMatchObject({ authorization: `Basic ${Buffer.from('robot:p@ss').toString('base64')}`, 'x-api-key': 'k3y', 'x-trace': 'kwarg' });
      const row = JSON.stringify(trigger.serialize());
      for (const secret of ['robot', 'p%40ss', 'k3y', '127.0.0.1']) expect(row).not.toContain(secret);
      expect(trigger.serialize().kwargs).toMatchObject({ url: 'jobs/7', connection: 'jobs_api', headers: { 'X-Trace': 'kwarg' } });
      // A connection that is no HTTP URL, or whose extras are not headers, fails the check naming it.
      process.env.DEFERFLOW_CONN_JOBS_API = 'sqlite:./x.db';
      await expect(new HttpTrigger({ url: '/x', connection: 'jobs_api' }).run(new AbortController().signal).next()).rejects.toThrow(
        'connection: connection "jobs_api" is a sqlite: URL; an HTTP check needs an http(s) URL',
      );
      process.env.DEFERFLOW_CONN_JOBS_API = `${base}/?__extra__=[1]`;
      await expect(new HttpTrigger({ url: '/x', connection: 'jobs_api' }).run(new AbortController().signal).next()).rejects.toThrow(
        'has an __extra__ that is not a JSON object of header names to text',
      );
    } finally {
      delete process.env.DEFERFLOW_CONN_JOBS_API;
    }
  });

  it('serializes to JSON and back to an equal trigger, defaults filled in', () => {
    const trigger = new HttpTrigger({ url: 'https://example.test/x', expectedStatus: [204, 200] });
    expect(trigger.serialize()).toEqual({
      classpath: 'deferflow.triggers.HttpTrigger',
      kwargs: { url: 'https://example.test/x', method: 'GET', expectedStatus: [200, 204], requestTimeout: 10, connectAttempts: 3, pollInterval: 30 },
    });
    expect(new HttpTrigger(trigger.serialize().kwargs as never).serialize()).toEqual(trigger.serialize());
  });

  it.each([
    [{ url: 'ftp://x' }, 'HttpTrigger: url "ftp://x" is not an http(s) URL'],
    [{ url: 'http://x', method: 'POST' }, 'method "POST" is not GET or HEAD'],
    [{ url: 'http://x', expectedStatus: [700] }, 'expectedStatus'],
    [{ url: 'http://x', jsonPath: 'a' }, 'jsonPath and jsonEquals go together'],
    [{ url: 'http://x', pollInterval: 0 }, 'pollInterval number 0 is not a number of seconds above 0'],
    [{ url: 'http://x', header: {} }, 'unknown field "header"'],
    [{ url: 'http://x', headers: { 'bad name': 'x' } }, 'headers: "bad name": "x" is not a header name with a text value'],
    [{ url: 'http://x', headers: { Accept: 1 } }, 'headers: "Accept": number 1 is not a header name with a text value'],
    [
      { url: 'https://bot:t0ken@api.test/x' },
      'url "https://***@api.test/x" holds credentials, which would be stored in the trigger row; put them in a connection',
    ],
    [{ url: '/status' }, 'url "/status" is not an http(s) URL (a path needs a connection to resolve it against)'],
    [{ url: '/status', connection: 'postgres://x' }, 'connection "postgres://x" is not a connection name'],
  ])('refuses %j, naming the field', (kwargs, message) => {
    expect(() => new HttpTrigger(kwargs as never)).toThrow(message);
  });

  it('HttpSensor refuses the same at DAG load, as DF_INVALID_SENSOR', () => {
    let thrown: unknown = null;
    try {
      new HttpSensor({ taskId: 'h', url: 'not a url' });
    } catch (error) {
      thrown = error;
    }
    expect((thrown as { code?: string }).code).toBe('DF_INVALID_SENSOR');
    expect((thrown as Error).message).toBe('HttpSensor: url "not a url" is not an http(s) URL (a path needs a connection to resolve it against)');
  });
});
