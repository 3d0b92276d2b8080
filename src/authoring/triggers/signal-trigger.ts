import { InvalidTriggerArgumentError } from '../../vocabulary/errors.ts';
import { canonicalJson, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { BaseTrigger, type SerializedTrigger } from './base-trigger.ts';
import { TriggerEvent } from './trigger-event.ts';
import { checkSignalKey, type Signal } from '../../model/signal.ts';

/** The SignalTrigger's kwargs: the key, the version to wait past, and an optional value to match. */
export interface SignalTriggerKwargs {
  /** The signal key waited on. */
  readonly key: string;
  /** Fire on a version after this one: the key's latest when the task deferred (see BaseOperator.waitForSignal). */
  readonly sinceVersion: number;
  /**
   * Only a signal whose value matches fires it: every field given here equals the value's, at
   * any depth (`{ status: 'ok' }` matches `{ status: 'ok', rows: 5 }`); a non-object must equal
   * the value. Absent: any signal.
   */
  readonly match?: JsonValue;
}

/** The event a SignalTrigger fires with: the signal. A type, so it is assignable to JsonValue. */
export type SignalEvent = {
  readonly key: string;
  readonly version: number;
  readonly value: JsonValue;
  /** ISO-8601, UTC. */
  readonly sentAt: string;
};

/**
 * Waits for a signal (AIP-35): fires with the first signal on `key` newer than `sinceVersion`
 * whose value matches `match`. With sinceVersion the key's latest version when the task deferred,
 * a signal sent right after the defer call is never missed (its version is higher) and one sent
 * before it never fires it. Task instances waiting on the same key from the same version share
 * one trigger row; the triggerer's signal service hears a send at once on PostgreSQL (NOTIFY) and
 * within its poll interval on SQLite.
 */
export class SignalTrigger extends BaseTrigger {
  /** The trigger's classpath. */
  static readonly classpath = 'deferflow.triggers.SignalTrigger';
  /** The signal key it waits on. */
  readonly key: string;
  /** It fires on the first version above this one. */
  readonly sinceVersion: number;
  /** Fires only on a value that matches this one (a subset match); undefined: any value. */
  readonly match: JsonValue | undefined;

  constructor(kwargs: SignalTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('SignalTrigger', why);
    if (kwargs === null || typeof kwargs !== 'object') throw invalid(`expected { key, sinceVersion }, got ${JSON.stringify(kwargs)}`);
    for (const field of Object.keys(kwargs)) {
      if (!['key', 'sinceVersion', 'match'].includes(field)) throw invalid(`unknown field ${JSON.stringify(field)} (the fields are key, sinceVersion, match)`);
    }
    try {
      this.key = checkSignalKey(kwargs.key);
    } catch (error) {
      throw invalid((error as Error).message);
    }
    if (typeof kwargs.sinceVersion !== 'number' || !Number.isSafeInteger(kwargs.sinceVersion) || kwargs.sinceVersion < 0) {
      throw invalid(`sinceVersion ${JSON.stringify(kwargs.sinceVersion)} is not a signal version (a whole number, 0 or more)`);
    }
    this.sinceVersion = kwargs.sinceVersion;
    this.match = kwargs.match;
  }

  /** Its key, version and match, as stored. */
  override serialize(): SerializedTrigger {
    const kwargs: JsonObject = { key: this.key, sinceVersion: this.sinceVersion };
    if (this.match !== undefined) kwargs.match = this.match;
    return { classpath: SignalTrigger.classpath, kwargs };
  }

  /** What the wait is for, as logs and the status page say it. */
  override describeWait(): string {
    return `signal ${this.key} after version ${this.sinceVersion}${this.match === undefined ? '' : ` matching ${canonicalJson(this.match)}`}`;
  }

  /** Waits for the first newer version of the key (matching, if asked) and yields it. */
  override async *run(): AsyncGenerator<TriggerEvent<SignalEvent>> {
    const match = this.match;
    const signal = await this.nextSignal(this.key, this.sinceVersion, match === undefined ? undefined : (candidate) => matches(candidate.value, match));
    yield new TriggerEvent({ key: signal.key, version: signal.version, value: signal.value, sentAt: new Date(signal.sentAt).toISOString() });
  }
}

/** Whether `value` holds everything `pattern` says: objects field by field at any depth, anything else equal. */
export function matches(value: JsonValue, pattern: JsonValue): boolean {
  if (pattern !== null && typeof pattern === 'object' && !Array.isArray(pattern)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
    return Object.entries(pattern).every(([field, expected]) => field in value && matches(value[field] as JsonValue, expected));
  }
  return canonicalJson(value) === canonicalJson(pattern);
}

export type { Signal };
