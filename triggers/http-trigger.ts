import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { canonicalJson, type JsonObject, type JsonValue } from '../src/vocabulary/serialization/json.ts';
import { connectionFromEnv } from '../src/authoring/connections/connections.ts';
import { InvalidOptionError, InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { TriggerEvent } from '../src/authoring/triggers/trigger-event.ts';
import { checkConnectionName } from './kwarg-checks.ts';
import { describeValue } from './date-time-trigger.ts';

/** What an HTTP check asks of a response (HttpTrigger's kwargs, HttpSensor's options). */
export interface HttpCheck {
  /** An http(s) URL; with `connection`, it may be a path resolved against the connection's URL (Airflow's endpoint). */
  readonly url: string;
  /**
   * A named connection (DEFERFLOW_CONN_<NAME>, an http(s) URL) whose secrets go with every
   * request and never into the trigger row: its user and password as Basic auth, and the
   * headers of its `__extra__` parameter (a JSON object, Airflow's connection extras), e.g.
   * `https://api.example.com/?__extra__={"Authorization":"Bearer …"}` (URL-encoded).
   */
  readonly connection?: string;
  /** Headers sent with every request (stored in the row: put secrets in a connection). They win over the connection's. */
  readonly headers?: Readonly<Record<string, string>>;
  /** GET or HEAD. @default 'GET' */
  readonly method?: 'GET' | 'HEAD';
  /** The statuses that count as an answer. @default [200] */
  readonly expectedStatus?: readonly number[];
  /** A dot path into the JSON body (`data.state`, `items.0.id`) that must equal `jsonEquals`. */
  readonly jsonPath?: string;
  /** The value at jsonPath that counts (compared as canonical JSON). */
  readonly jsonEquals?: JsonValue;
  /** Text the body must contain. */
  readonly bodyContains?: string;
  /** Seconds before a request is given up on. @default 10 */
  readonly requestTimeout?: number;
  /** Attempts per check when the connection fails (refused, reset, timed out), with 0.5 s, 1 s, 2 s … between. @default 3 */
  readonly connectAttempts?: number;
}

export interface HttpTriggerKwargs extends HttpCheck {
  /** Seconds between checks. @default 30 */
  readonly pollInterval?: number;
}

// A type, not an interface: it must be assignable to JsonValue (an event payload).
export type HttpAnswer = {
  readonly url: string;
  readonly status: number;
};

type ResolvedCheck = Required<Pick<HttpCheck, 'url' | 'method' | 'expectedStatus' | 'requestTimeout' | 'connectAttempts'>> &
  Pick<HttpCheck, 'jsonPath' | 'jsonEquals' | 'bodyContains' | 'connection' | 'headers'>;

const CHECK_FIELDS = [
  'url',
  'connection',
  'headers',
  'method',
  'expectedStatus',
  'jsonPath',
  'jsonEquals',
  'bodyContains',
  'requestTimeout',
  'connectAttempts',
];
// RFC 9110's token: what a header name may be.
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** The check with its defaults, every field validated: InvalidTriggerArgumentError naming `owner` and the field. */
export function resolveHttpCheck(given: HttpCheck, owner: string, extraFields: readonly string[] = []): ResolvedCheck {
  const invalid = (why: string) => new InvalidTriggerArgumentError(owner, why);
  if (given === null || typeof given !== 'object') throw invalid(`expected { url, … }, got ${describeValue(given)}`);
  for (const key of Object.keys(given)) {
    if (!CHECK_FIELDS.includes(key) && !extraFields.includes(key))
      throw invalid(`unknown field ${JSON.stringify(key)} (the fields are ${[...CHECK_FIELDS, ...extraFields].join(', ')})`);
  }
  const {
    url,
    connection,
    headers,
    method = 'GET',
    expectedStatus = [200],
    jsonPath,
    jsonEquals,
    bodyContains,
    requestTimeout = 10,
    connectAttempts = 3,
  } = given;
  if (connection !== undefined) checkConnectionName(connection, invalid);
  let parsed: URL | null = null;
  try {
    // With a connection, a path stands for itself until the connection's URL is known (at request time).
    parsed = typeof url === 'string' ? new URL(url, connection === undefined ? undefined : 'http://connection.invalid/') : null;
  } catch {
    parsed = null;
  }
  if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
    throw invalid(
      `url ${describeValue(url)} is not an http(s) URL${connection === undefined ? ' (a path needs a connection to resolve it against)' : ' or a path'}`,
    );
  }
  if (typeof url === 'string' && /^[a-z][a-z0-9+.-]*:\/\/[^/]*@/i.test(url)) {
    throw invalid(
      `url ${describeValue(url.replace(/\/\/[^/]*@/, '//***@'))} holds credentials, which would be stored in the trigger row; put them in a connection`,
    );
  }
  if (headers !== undefined) {
    if (headers === null || typeof headers !== 'object' || Array.isArray(headers))
      throw invalid(`headers ${describeValue(headers)} is not an object of header names to text`);
    for (const [name, value] of Object.entries(headers)) {
      if (!HEADER_NAME.test(name) || typeof value !== 'string')
        throw invalid(`headers: ${JSON.stringify(name)}: ${describeValue(value)} is not a header name with a text value`);
    }
  }
  if (method !== 'GET' && method !== 'HEAD') throw invalid(`method ${describeValue(method)} is not GET or HEAD`);
  if (!Array.isArray(expectedStatus) || expectedStatus.length === 0 || !expectedStatus.every((code) => Number.isInteger(code) && code >= 100 && code <= 599)) {
    throw invalid(`expectedStatus ${describeValue(expectedStatus)} is not a list of HTTP statuses, e.g. [200, 204]`);
  }
  if (jsonPath !== undefined && (typeof jsonPath !== 'string' || jsonPath === ''))
    throw invalid(`jsonPath ${describeValue(jsonPath)} is not a dot path, e.g. "data.state"`);
  if ((jsonPath === undefined) !== (jsonEquals === undefined)) throw invalid('jsonPath and jsonEquals go together: give both, or neither');
  if (bodyContains !== undefined && typeof bodyContains !== 'string') throw invalid(`bodyContains ${describeValue(bodyContains)} is not text`);
  if (method === 'HEAD' && (jsonPath !== undefined || bodyContains !== undefined))
    throw invalid('a HEAD request has no body: jsonPath and bodyContains need GET');
  if (typeof requestTimeout !== 'number' || !(requestTimeout > 0))
    throw invalid(`requestTimeout ${describeValue(requestTimeout)} is not a number of seconds above 0`);
  if (!Number.isInteger(connectAttempts) || connectAttempts < 1)
    throw invalid(`connectAttempts ${describeValue(connectAttempts)} is not a whole number, 1 or more`);
  return {
    url,
    method,
    expectedStatus: [...expectedStatus].sort((a, b) => a - b),
    requestTimeout,
    connectAttempts,
    ...(connection === undefined ? {} : { connection }),
    ...(headers === undefined ? {} : { headers: { ...headers } }),
    ...(jsonPath === undefined ? {} : { jsonPath, jsonEquals }),
    ...(bodyContains === undefined ? {} : { bodyContains }),
  };
}

/**
 * Where a check's request goes and with which headers: its url (resolved against the
 * connection's, if it names one) and its headers laid over the connection's Basic auth and
 * `__extra__` headers. Read from the environment at each request, so a rotated secret is used
 * at the next one; a connection that is not an http(s) URL, or whose __extra__ is not a JSON
 * object of text, is refused naming the connection and what to fix.
 */
export function httpRequestOf(check: ResolvedCheck): { url: string; headers: Record<string, string> } {
  if (check.connection === undefined) return { url: check.url, headers: { ...check.headers } };
  const name = check.connection;
  const refuse = (why: string) => new InvalidOptionError('connection', `connection ${JSON.stringify(name)} ${why}`);
  let base: URL;
  try {
    base = new URL(connectionFromEnv(name).url);
  } catch (error) {
    if ((error as { code?: string }).code === 'DF_UNKNOWN_CONNECTION') throw error;
    throw refuse('is not a URL; an HTTP check needs an http(s) URL');
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw refuse(`is a ${base.protocol} URL; an HTTP check needs an http(s) URL`);
  const headers: Record<string, string> = {};
  if (base.username !== '' || base.password !== '') {
    const credentials = `${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`;
    headers.authorization = `Basic ${Buffer.from(credentials).toString('base64')}`;
  }
  const extra = base.searchParams.get('__extra__');
  if (extra !== null) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(extra);
    } catch {
      throw refuse('has an __extra__ that is not JSON; give a URL-encoded JSON object of header names to text');
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed) || !Object.values(parsed).every((value) => typeof value === 'string')) {
      throw refuse('has an __extra__ that is not a JSON object of header names to text');
    }
    Object.assign(headers, parsed);
  }
  base.username = '';
  base.password = '';
  base.searchParams.delete('__extra__');
  return { url: new URL(check.url, base).toString(), headers: { ...headers, ...check.headers } };
}

/**
 * One check: the request (retried with backoff while the connection fails), then whether the
 * answer counts. Resolves with the answer when it does, null when not yet; `sleep` pauses between
 * attempts (the triggerer's shared timer on a triggerer).
 */
export async function checkHttp(check: ResolvedCheck, signal: AbortSignal, sleep: (ms: number) => Promise<void>): Promise<HttpAnswer | null> {
  const { url, headers } = httpRequestOf(check);
  for (let attempt = 1; ; attempt++) {
    let response: Response;
    try {
      response = await fetch(url, { method: check.method, headers, signal: AbortSignal.any([signal, AbortSignal.timeout(check.requestTimeout * 1000)]) });
    } catch (error) {
      if (signal.aborted) throw error;
      if (attempt >= check.connectAttempts) return null; // unreachable for now: the next check tries again
      await sleep(500 * 2 ** (attempt - 1));
      continue;
    }
    if (!check.expectedStatus.includes(response.status)) {
      await response.body?.cancel();
      return null;
    }
    if (check.jsonPath === undefined && check.bodyContains === undefined) {
      await response.body?.cancel();
      return { url, status: response.status };
    }
    const body = await response.text();
    if (check.bodyContains !== undefined && !body.includes(check.bodyContains)) return null;
    if (check.jsonPath !== undefined) {
      let value: unknown;
      try {
        value = check.jsonPath
          .split('.')
          .reduce<unknown>((at, key) => (at !== null && typeof at === 'object' ? (at as Record<string, unknown>)[key] : undefined), JSON.parse(body));
      } catch {
        return null; // not JSON (yet): not an answer
      }
      if (value === undefined || canonicalJson(value as JsonValue) !== canonicalJson(check.jsonEquals as JsonValue)) return null;
    }
    return { url, status: response.status };
  }
}

/**
 * Fires once `url` answers as asked: one of `expectedStatus`, and, if given, a JSON field equal to
 * `jsonEquals` or a body containing `bodyContains`. Checks at once, then every `pollInterval`
 * seconds; a failed connection is retried (connectAttempts, with backoff) before the check counts
 * as "not yet". The event payload is `{ url, status }`. Cancelling it aborts the request in flight.
 */
export class HttpTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.HttpTrigger';
  readonly check: ResolvedCheck;
  readonly pollInterval: number;

  constructor(kwargs: HttpTriggerKwargs) {
    super();
    const { pollInterval = 30, ...check } = kwargs ?? ({} as HttpTriggerKwargs);
    this.check = resolveHttpCheck(check, 'HttpTrigger', ['pollInterval']);
    if (typeof pollInterval !== 'number' || !(pollInterval > 0)) {
      throw new InvalidTriggerArgumentError('HttpTrigger', `pollInterval ${describeValue(pollInterval)} is not a number of seconds above 0`);
    }
    this.pollInterval = pollInterval;
  }

  override serialize(): SerializedTrigger {
    return { classpath: HttpTrigger.classpath, kwargs: { ...(this.check as unknown as JsonObject), pollInterval: this.pollInterval } };
  }

  override async *run(signal: AbortSignal): AsyncGenerator<TriggerEvent<HttpAnswer>> {
    for (;;) {
      const answer = await checkHttp(this.check, signal, (ms) => this.sleep(ms));
      if (answer) {
        yield new TriggerEvent(answer);
        return;
      }
      await this.sleep(this.pollInterval * 1000);
    }
  }
}
