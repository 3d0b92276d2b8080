import { sameToken } from '../config/tokens.ts';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { codeOf, describeThrown } from '../errors.ts';
import type { JsonValue } from '../serialization/json.ts';
import { MAX_SIGNAL_VALUE_BYTES } from './signal.ts';

export interface SignalHttpOptions {
  /** The bearer token a request must carry (`Authorization: Bearer <token>`). */
  readonly token: string;
  /** Where to listen. @default '127.0.0.1' */
  readonly host: string;
  /** 0: any free port. */
  readonly port: number;
}

/**
 * `POST /signals/:key` with a JSON body sends a signal (AIP-35's way in for outside systems):
 * 201 `{ key, version }`. Refused: 401 without the bearer token or with a wrong one (compared in
 * constant time), 400 for a bad key or a body that is not JSON (the error code and message in
 * the body), 413 for a body past the value limit, 404 / 405 for anything else. Only served when a
 * token is configured, and on 127.0.0.1 unless told otherwise.
 */
export class SignalHttpServer {
  readonly #server: http.Server;
  readonly #token: Buffer;
  /** Where it listens, once started. */
  address: AddressInfo | null = null;

  constructor(
    private readonly options: SignalHttpOptions,
    private readonly send: (key: string, value: JsonValue) => Promise<number>,
    private readonly log: Logger,
  ) {
    this.#token = Buffer.from(options.token);
    this.#server = http.createServer((request, response) => {
      this.#handle(request, response).catch((error: unknown) => {
        this.log.error({ code: codeOf(error, 'DF_DATABASE'), error: describeThrown(error).error }, `signal endpoint: ${describeThrown(error).error}`);
        if (!response.headersSent) reply(response, 500, { error: 'the signal could not be stored; try again', code: codeOf(error, 'DF_DATABASE') });
      });
    });
  }

  /** Starts listening; resolves with the address (the port, when 0 was asked for). */
  async start(): Promise<AddressInfo> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.options.port, this.options.host, () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    const address = this.#server.address() as AddressInfo;
    this.address = address;
    this.log.info({ host: address.address, port: address.port }, `signal endpoint listening on http://${address.address}:${address.port}/signals/:key`);
    return address;
  }

  async stop(): Promise<void> {
    if (!this.#server.listening) return;
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    const path = new URL(request.url ?? '/', 'http://signal.invalid').pathname;
    const match = /^\/signals\/([^/]+)$/.exec(path);
    if (!match) return reply(response, 404, { error: 'not found: POST /signals/:key' });
    if (request.method !== 'POST') {
      response.setHeader('allow', 'POST');
      return reply(response, 405, { error: `${request.method} is not allowed: POST /signals/:key` });
    }
    if (!this.#authorized(request.headers.authorization)) {
      response.setHeader('www-authenticate', 'Bearer realm="deferflow signals"');
      request.resume();
      return reply(response, 401, { error: 'a valid bearer token is needed: Authorization: Bearer <token>' });
    }
    const body = await readBody(request, MAX_SIGNAL_VALUE_BYTES);
    if (body === null) return reply(response, 413, { error: `the body is larger than ${MAX_SIGNAL_VALUE_BYTES} bytes`, code: 'DF_INVALID_SIGNAL' });
    let value: JsonValue = null;
    if (body.trim() !== '') {
      try {
        value = JSON.parse(body) as JsonValue;
      } catch {
        return reply(response, 400, { error: 'the body is not JSON; send the signal value as JSON (empty: null)', code: 'DF_NOT_JSON' });
      }
    }
    let key: string;
    try {
      key = decodeURIComponent(match[1]!);
    } catch {
      return reply(response, 400, { error: 'the key is not valid percent-encoding', code: 'DF_INVALID_SIGNAL' });
    }
    let version: number;
    try {
      version = await this.send(key, value);
    } catch (error) {
      const code = codeOf(error, 'DF_DATABASE');
      if (code === 'DF_INVALID_SIGNAL' || code === 'DF_NOT_JSON' || code === 'DF_NOT_STORABLE')
        return reply(response, 400, { error: (error as Error).message, code });
      throw error;
    }
    reply(response, 201, { key, version });
  }

  #authorized(header: string | undefined): boolean {
    return sameToken(/^Bearer (.+)$/i.exec(header ?? '')?.[1], this.#token);
  }
}

function reply(response: http.ServerResponse, status: number, body: JsonValue): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
}

/** The body as text, or null when it is longer than `limit` bytes (the rest is not read). */
function readBody(request: http.IncomingMessage, limit: number): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        request.removeAllListeners('data');
        request.resume();
        resolve(null);
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}
