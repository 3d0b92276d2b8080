import {
  BaseTrigger,
  canonicalJson,
  InvalidTriggerArgumentError,
  TriggerEvent,
  type JsonObject,
  type JsonValue,
  type SerializedTrigger,
} from '../src/index.ts';
import { describeValue } from './date-time-trigger.ts';

/** What an HTTP check asks of a response (HttpTrigger's kwargs, HttpSensor's options). */
export interface HttpCheck {
  /** An http(s) URL. */
  readonly url: string;
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
  Pick<HttpCheck, 'jsonPath' | 'jsonEquals' | 'bodyContains'>;

const CHECK_FIELDS = ['url', 'method', 'expectedStatus', 'jsonPath', 'jsonEquals', 'bodyContains', 'requestTimeout', 'connectAttempts'];

/** The check with its defaults, every field validated: InvalidTriggerArgumentError naming `owner` and the field. */
export function resolveHttpCheck(given: HttpCheck, owner: string, extraFields: readonly string[] = []): ResolvedCheck {
  const invalid = (why: string) => new InvalidTriggerArgumentError(owner, why);
  if (given === null || typeof given !== 'object') throw invalid(`expected { url, … }, got ${describeValue(given)}`);
  for (const key of Object.keys(given)) {
    if (!CHECK_FIELDS.includes(key) && !extraFields.includes(key))
      throw invalid(`unknown field ${JSON.stringify(key)} (the fields are ${[...CHECK_FIELDS, ...extraFields].join(', ')})`);
  }
  const { url, method = 'GET', expectedStatus = [200], jsonPath, jsonEquals, bodyContains, requestTimeout = 10, connectAttempts = 3 } = given;
  let parsed: URL | null = null;
  try {
    parsed = typeof url === 'string' ? new URL(url) : null;
  } catch {
    parsed = null;
  }
  if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) throw invalid(`url ${describeValue(url)} is not an http(s) URL`);
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
    ...(jsonPath === undefined ? {} : { jsonPath, jsonEquals }),
    ...(bodyContains === undefined ? {} : { bodyContains }),
  };
}

/**
 * One check: the request (retried with backoff while the connection fails), then whether the
 * answer counts. Resolves with the answer when it does, null when not yet; `sleep` pauses between
 * attempts (the triggerer's shared timer on a triggerer).
 */
export async function checkHttp(check: ResolvedCheck, signal: AbortSignal, sleep: (ms: number) => Promise<void>): Promise<HttpAnswer | null> {
  for (let attempt = 1; ; attempt++) {
    let response: Response;
    try {
      response = await fetch(check.url, { method: check.method, signal: AbortSignal.any([signal, AbortSignal.timeout(check.requestTimeout * 1000)]) });
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
      return { url: check.url, status: response.status };
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
    return { url: check.url, status: response.status };
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
