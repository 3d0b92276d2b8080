import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { describeThrown, InvalidOptionError } from '../../vocabulary/errors.ts';
import type { DaemonHealth } from '../jobs/daemon.ts';
import type { Metrics } from './metrics.ts';
import type { ObservabilityHttpOptions } from './options.ts';
import { installService, type HelperService } from '../../vocabulary/helper-thread.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';

/** A reply from the main thread's routes. */
export interface HttpReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** A request as the main thread's routes see it. */
export interface HttpRequest {
  readonly method: string;
  /** Path and query, as sent. */
  readonly url: string;
  /** The headers a route reads (only these cross to the main thread). */
  readonly headers: {
    readonly authorization?: string | undefined;
    /** Where a browser's form was sent from (checked against host by the console's actions). */
    readonly origin?: string | undefined;
    readonly host?: string | undefined;
    /** Set by a proxy in front: recorded as where an action came from. */
    readonly 'x-forwarded-for'?: string | undefined;
  };
  /** The client's address (the proxy's, behind one). */
  readonly remoteAddress?: string | undefined;
  /**
   * The body as text, for a method other than GET and HEAD (undefined for those); null when it
   * was larger than MAX_REQUEST_BODY_BYTES (not read further: a route answers 413).
   */
  readonly body?: string | null;
}
/** Where a request came from, as the audit log records it: the client's address, and the proxy's forward. */
export function clientAddress(request: HttpRequest): string | null {
  const forwarded = request.headers['x-forwarded-for'];
  const address = [request.remoteAddress, forwarded ? `forwarded for ${forwarded}` : null].filter((part) => part).join(', ');
  return address === '' ? null : address;
}

/** The largest request body passed on to a route: a signal's largest value (MAX_SIGNAL_VALUE_BYTES). */
export const MAX_REQUEST_BODY_BYTES = 64 * 1024;

/** A JSON reply of a route: the body as one line of JSON. */
export function jsonReply(status: number, body: JsonValue, headers: Record<string, string> = {}): HttpReply {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body: `${JSON.stringify(body)}\n` };
}

/** More pages served by the main thread (the status page); null: not theirs (404). */
export type ExtraRoutes = (request: HttpRequest) => Promise<HttpReply | null>;

/** How often the main thread records that its loop turns, and copies its daemons' heartbeats for /health. */
const TICK_MS = 250;

/** Slots per daemon in the shared state: job id (-1 before it has one), last heartbeat (0: none), threshold. */
const SLOTS_PER_DAEMON = 3;

/**
 * The process's HTTP endpoint: `/metrics` (Prometheus text), `/health` (200 or 503 with a JSON body
 * naming each check) and whatever `extraRoutes` serves.
 *
 * The server runs on the process's helper thread (threads/helper-thread.ts, beside the
 * triggerer's watchdog), so /health still answers while the event loop is blocked (a trigger
 * spinning, a task computing): that is one of the things it must report.
 * The main thread writes into shared memory, every TICK_MS, the time (its loop turned) and each
 * daemon's last heartbeat; the thread judges those alone. Everything else (/metrics, pages) is
 * passed to the main thread and answered there; if the loop does not answer within the loop
 * threshold, the thread answers 503 itself.
 */
export class ObservabilityServer {
  /** The loop's last turn, then SLOTS_PER_DAEMON per daemon (a process runs at most three). */
  readonly #shared = new SharedArrayBuffer(8 * (1 + 3 * SLOTS_PER_DAEMON));
  readonly #state = new BigInt64Array(this.#shared);
  #service: HelperService | null = null;
  #ticker: NodeJS.Timeout | null = null;
  /** Where it listens, once started. */
  address: AddressInfo | null = null;

  constructor(
    private readonly options: ObservabilityHttpOptions,
    private readonly metrics: Metrics,
    /** The daemons this process runs, in a fixed order. */
    private readonly daemons: readonly { health(): DaemonHealth }[],
    private readonly log: Logger,
    private readonly extraRoutes: ExtraRoutes = async () => null,
  ) {}

  /**
   * Starts listening; resolves with the address, or null when the port is optional and in use
   * (warned about). A port that cannot be had otherwise fails with DF_INVALID_OPTION naming http-port.
   */
  async start(): Promise<AddressInfo | null> {
    this.metrics.collectProcessMetrics();
    this.#tick();
    this.#ticker = setInterval(() => this.#tick(), TICK_MS);
    this.#ticker.unref();
    const started = await new Promise<{ address: AddressInfo } | { error: string; code: string }>((resolve) => {
      const service = installService({
        source: HEALTH_SERVICE_SOURCE,
        data: {
          host: this.options.host,
          port: this.options.port,
          loopThresholdMs: this.options.loopThresholdMs,
          tickMs: TICK_MS,
          maxBodyBytes: MAX_REQUEST_BODY_BYTES,
          shared: this.#shared,
          kinds: this.daemons.map((daemon) => daemon.health().kind),
        },
        // The endpoint does not keep the process alive (its daemons do), as its thread never did.
        onMessage: (message: ThreadMessage) => {
          if (message.type === 'request') void this.#answer(message);
          else if (message.type === 'listening') resolve({ address: message.address });
          else if (message.type === 'error') resolve({ error: message.error, code: message.code });
        },
        onLost: (reason) => {
          resolve({ error: reason, code: '' });
          if (this.#service === service && this.address !== null) this.log.error({ error: reason }, `/metrics and /health are no longer served: ${reason}`);
        },
      });
      this.#service = service;
    });
    if ('error' in started) {
      await this.stop();
      const where = `${this.options.host}:${this.options.port}`;
      if (started.code === 'EADDRINUSE' && this.options.optional) {
        this.log.warn(
          { code: 'DF_INVALID_OPTION', host: this.options.host, port: this.options.port },
          `the HTTP endpoint (/metrics, /health and this process's other routes) is not served: ${where} is in use (another deferflow?); give each process its own --http-port (0: any free one)`,
        );
        return null;
      }
      throw new InvalidOptionError(
        'http-port',
        `/metrics and /health cannot listen on ${where}: ${started.error}; choose another --http-port (0: any free one, off: none)`,
      );
    }
    this.address = started.address;
    const base = `http://${started.address.address}:${started.address.port}`;
    this.log.info({ host: started.address.address, port: started.address.port }, `serving ${base}/metrics and ${base}/health`);
    return started.address;
  }

  async stop(): Promise<void> {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
    const service = this.#service;
    this.#service = null;
    await service?.remove();
  }

  /** Records that the loop turned now, and each daemon's heartbeat, for the thread to judge. */
  #tick(): void {
    const state = this.#state;
    Atomics.store(state, 0, BigInt(Date.now()));
    this.daemons.forEach((daemon, i) => {
      const { jobId, lastHeartbeatAt, thresholdMs } = daemon.health();
      const at = 1 + i * SLOTS_PER_DAEMON;
      Atomics.store(state, at, BigInt(jobId ?? -1));
      Atomics.store(state, at + 1, BigInt(lastHeartbeatAt ?? 0));
      Atomics.store(state, at + 2, BigInt(thresholdMs));
    });
  }

  async #answer(message: Extract<ThreadMessage, { type: 'request' }>): Promise<void> {
    let reply: HttpReply;
    try {
      const path = new URL(message.url, 'http://deferflow.invalid').pathname;
      if (path === '/metrics') {
        reply =
          message.method === 'GET' || message.method === 'HEAD'
            ? { status: 200, headers: { 'content-type': this.metrics.contentType }, body: await this.metrics.text() }
            : { status: 405, headers: { 'content-type': 'text/plain', allow: 'GET' }, body: `${message.method} is not allowed: GET /metrics\n` };
      } else {
        reply = (await this.extraRoutes(message)) ?? { status: 404, headers: { 'content-type': 'text/plain' }, body: 'not found: GET /metrics or /health\n' };
      }
    } catch (error) {
      this.log.error({ error: describeThrown(error).error, url: message.url }, `serving ${message.url} failed: ${describeThrown(error).error}`);
      reply = { status: 500, headers: { 'content-type': 'text/plain' }, body: `${describeThrown(error).error}\n` };
    }
    this.#service?.port.postMessage({ type: 'reply', id: message.id, ...reply });
  }
}

type ThreadMessage =
  | { type: 'listening'; address: AddressInfo }
  | { type: 'error'; error: string; code: string }
  | ({ type: 'request'; id: number } & HttpRequest);

/**
 * The service's code (plain CommonJS, the body of `(require, port, data) => stop`: the same text
 * works from the TypeScript sources and from the built package). It owns the socket; it reads
 * the shared state for /health and passes every other request to the main thread over `port`.
 */
const HEALTH_SERVICE_SOURCE = `
'use strict';
const http = require('node:http');
const { host, port: listenPort, loopThresholdMs, tickMs, maxBodyBytes, shared, kinds } = data;
const state = new BigInt64Array(shared);
const pending = new Map();
let nextId = 1;

function health() {
  const now = Date.now();
  const checks = {};
  const failing = [];
  const sinceTurn = now - Number(Atomics.load(state, 0));
  const loopOk = sinceTurn <= loopThresholdMs + tickMs;
  checks.event_loop = { ok: loopOk, last_turn_ms_ago: sinceTurn, threshold_ms: loopThresholdMs };
  if (!loopOk) failing.push('event_loop');
  kinds.forEach((kind, i) => {
    const at = 1 + i * ${SLOTS_PER_DAEMON};
    const jobId = Number(Atomics.load(state, at));
    const beat = Number(Atomics.load(state, at + 1));
    const threshold = Number(Atomics.load(state, at + 2));
    const check = { ok: false, job_id: jobId < 0 ? null : jobId, heartbeat_age_ms: beat === 0 ? null : now - beat, threshold_ms: threshold };
    if (beat === 0) check.reason = 'not running: starting, stopping or stopped';
    else if (now - beat > threshold) check.reason = 'its heartbeat has not been written for ' + (now - beat) + ' ms (the database?)';
    else check.ok = true;
    checks[kind] = check;
    if (!check.ok) failing.push(kind);
  });
  return { status: failing.length === 0 ? 'ok' : 'failing', failing, checks };
}

function send(response, status, headers, body) {
  response.writeHead(status, headers);
  response.end(body);
}

const server = http.createServer((request, response) => {
  const path = (request.url || '/').split('?')[0];
  if (path === '/health') {
    const body = health();
    send(response, body.status === 'ok' ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' }, JSON.stringify(body) + '\\n');
    return;
  }
  const forward = (body) => {
    const id = nextId++;
    const timer = setTimeout(() => {
      pending.delete(id);
      send(response, 503, { 'content-type': 'application/json' }, JSON.stringify({
        error: 'the process did not answer within ' + loopThresholdMs + ' ms: its event loop is blocked (see /health)',
      }) + '\\n');
    }, loopThresholdMs);
    pending.set(id, { response, timer });
    const { authorization, origin, host: hostHeader } = request.headers;
    const headers = { authorization, origin, host: hostHeader, 'x-forwarded-for': request.headers['x-forwarded-for'] };
    const remoteAddress = request.socket.remoteAddress;
    port.postMessage({ type: 'request', id, method: request.method, url: request.url || '/', headers, remoteAddress, body });
  };
  if (request.method === 'GET' || request.method === 'HEAD') {
    request.resume();
    forward(undefined);
    return;
  }
  // A body is read up to maxBodyBytes; past that it is drained and passed on as null (413).
  const chunks = [];
  let size = 0;
  request.on('data', (chunk) => {
    size += chunk.length;
    if (size <= maxBodyBytes) chunks.push(chunk);
  });
  request.on('end', () => forward(size > maxBodyBytes ? null : Buffer.concat(chunks).toString('utf8')));
  request.on('error', () => response.destroy());
});

port.on('message', (message) => {
  if (message.type !== 'reply') return;
  const waiting = pending.get(message.id);
  if (!waiting) return;
  pending.delete(message.id);
  clearTimeout(waiting.timer);
  send(waiting.response, message.status, message.headers, message.body);
});

server.on('error', (error) => port.postMessage({ type: 'error', error: error.message, code: error.code || '' }));
server.listen(listenPort, host, () => port.postMessage({ type: 'listening', address: server.address() }));
return () => {
  for (const waiting of pending.values()) clearTimeout(waiting.timer);
  pending.clear();
  const closed = new Promise((resolve) => server.close(resolve));
  server.closeAllConnections();
  return closed;
};
`;
