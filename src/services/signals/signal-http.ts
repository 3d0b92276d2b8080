import { sameToken } from '../../vocabulary/options/tokens.ts';
import { codeOf } from '../../vocabulary/errors.ts';
import { clientAddress, jsonReply, type ExtraRoutes, type HttpReply, type HttpRequest } from '../observability/http-server.ts';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';
import { nobodyWarning, reachesNobody, type SignalAudience } from './signal-audience.ts';
import { MAX_SIGNAL_VALUE_BYTES } from '../../model/signal.ts';

/** What a send reports: the version the signal got, and who it reached. */
export interface SentSignal {
  readonly version: number;
  readonly audience: SignalAudience;
}

/**
 * `POST /signals/:key` with a JSON body sends a signal (AIP-35's way in for outside systems), as
 * a route of the process's HTTP endpoint (its /metrics and /health port). 201 with
 * `{ key, version, woke, signal_actions, scheduled_dags }`: the deferred task instances whose wait
 * it fires, the task instances of unfinished runs with an action on the key, the DAGs scheduled
 * on it, and, when it reaches none of them, a `warning` naming the closest key deferflow knows.
 * Refused: 401 without the bearer token or with a wrong one (compared in constant time), 400 for
 * a bad key or a body that is not JSON (the error code and message in the body), 413 for a body
 * past the value limit, 405 for another method. Other paths are not this route's (null).
 */
export function signalRoute(token: string, send: (key: string, value: JsonValue, from: string | null) => Promise<SentSignal>): ExtraRoutes {
  const expected = Buffer.from(token);
  return async (request: HttpRequest): Promise<HttpReply | null> => {
    const path = new URL(request.url, 'http://signal.invalid').pathname;
    const match = /^\/signals\/([^/]+)$/.exec(path);
    if (!match) return null;
    if (request.method !== 'POST') return jsonReply(405, { error: `${request.method} is not allowed: POST /signals/:key` }, { allow: 'POST' });
    if (!sameToken(/^Bearer (.+)$/i.exec(request.headers.authorization ?? '')?.[1], expected)) {
      return jsonReply(
        401,
        { error: 'a valid bearer token is needed: Authorization: Bearer <token>' },
        { 'www-authenticate': 'Bearer realm="deferflow signals"' },
      );
    }
    if (request.body === null) return jsonReply(413, { error: `the body is larger than ${MAX_SIGNAL_VALUE_BYTES} bytes`, code: 'DF_INVALID_SIGNAL' });
    let value: JsonValue = null;
    if ((request.body ?? '').trim() !== '') {
      try {
        value = JSON.parse(request.body!) as JsonValue;
      } catch {
        return jsonReply(400, { error: 'the body is not JSON; send the signal value as JSON (empty: null)', code: 'DF_NOT_JSON' });
      }
    }
    let key: string;
    try {
      key = decodeURIComponent(match[1]!);
    } catch {
      return jsonReply(400, { error: 'the key is not valid percent-encoding', code: 'DF_INVALID_SIGNAL' });
    }
    let sent: SentSignal;
    try {
      sent = await send(key, value, clientAddress(request));
    } catch (error) {
      const code = codeOf(error, 'DF_DATABASE');
      if (code === 'DF_INVALID_SIGNAL' || code === 'DF_NOT_JSON' || code === 'DF_NOT_STORABLE')
        return jsonReply(400, { error: (error as Error).message, code });
      throw error;
    }
    const { audience } = sent;
    const body: JsonObject = {
      key,
      version: sent.version,
      woke: audience.waits,
      signal_actions: audience.signalActions,
      scheduled_dags: [...audience.scheduledDags],
    };
    if (reachesNobody(audience)) body.warning = nobodyWarning(key, sent.version, audience);
    return jsonReply(201, body);
  };
}
