import { DateTime } from 'luxon';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { TaskSuccessEvent, TriggerEvent } from '../src/authoring/triggers/trigger-event.ts';

/** A timezone-aware moment: an ISO-8601 string with an offset or `Z`, a luxon DateTime, or a Date. */
export type MomentInput = string | Date | DateTime;

const PASS_INSTEAD =
  'pass an ISO-8601 string with a UTC offset or Z (e.g. "2030-05-01T12:00:00Z" or "2030-05-01T14:00:00+02:00"), ' + 'a valid luxon DateTime, or a valid Date';

/**
 * Fires once, at `moment`, with the moment (its ISO string) as the event payload. A moment in the
 * past fires at once; it never fires before the moment. With `endFromTrigger: true` the event
 * ends the waiting task instances as success (a TaskSuccessEvent, Airflow's end_from_trigger):
 * a task that only waits, started from this trigger, never needs a worker.
 *
 * A moment is an instant, so it is kept as one canonical ISO string in UTC: luxon's `toISO()`
 * form with milliseconds and `Z`, e.g. "2030-05-01T12:00:00.000Z". The same instant given any
 * way ("…T14:00:00+02:00", "…T12:00:00Z", a Date, a DateTime in any zone) serializes alike and
 * shares one trigger row. The instance holds just its epoch milliseconds.
 */
export class DateTimeTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.DateTimeTrigger';

  /** The moment in epoch milliseconds. */
  readonly momentMs: number;
  /**
   * The canonical ISO-8601 moment in UTC; also the event payload. Made from momentMs when read
   * (Date's toISOString is the canonical form for years 0000–9999): a string held by every
   * waiting trigger costs 40 bytes each, a twenty-fifth of what one costs the triggerer. A moment
   * outside those years keeps its string on the instance instead.
   */
  get moment(): string {
    return new Date(this.momentMs).toISOString();
  }
  /**
   * The event ends the task instances (success) instead of resuming them on a worker. False
   * comes from the prototype, so a plain wait carries no extra field (100,000 triggers add up).
   */
  get endFromTrigger(): boolean {
    return false;
  }

  constructor(kwargs: { moment: MomentInput; endFromTrigger?: boolean }) {
    super();
    if (kwargs === null || typeof kwargs !== 'object') {
      throw new InvalidTriggerArgumentError('DateTimeTrigger', `expected kwargs { moment }, got ${describeValue(kwargs)}`);
    }
    for (const key in kwargs) {
      if (key !== 'moment' && key !== 'endFromTrigger') {
        throw new InvalidTriggerArgumentError('DateTimeTrigger', `unknown kwarg ${JSON.stringify(key)} (the kwargs are moment and endFromTrigger)`);
      }
    }
    const endFromTrigger = kwargs.endFromTrigger ?? false;
    if (typeof endFromTrigger !== 'boolean') {
      throw new InvalidTriggerArgumentError('DateTimeTrigger', `endFromTrigger ${describeValue(endFromTrigger)} is not a boolean`);
    }
    const [moment, momentMs] = normalizeMoment(kwargs.moment);
    this.momentMs = momentMs;
    if (moment.length !== CANONICAL_LENGTH) Object.defineProperty(this, 'moment', { value: moment, enumerable: true });
    if (endFromTrigger) Object.defineProperty(this, 'endFromTrigger', { value: true, enumerable: true });
  }

  override serialize(): SerializedTrigger {
    // endFromTrigger is written only when set, so plain waits keep the kwargs (and the shared rows) they always had.
    return { classpath: DateTimeTrigger.classpath, kwargs: this.endFromTrigger ? { moment: this.moment, endFromTrigger: true } : { moment: this.moment } };
  }

  override async *run(): AsyncGenerator<TriggerEvent<string>, void, void> {
    // sleepUntil never wakes early; the loop only guards the promise that this never fires early.
    while (Date.now() < this.momentMs) await this.sleepUntil(this.momentMs);
    yield this.endFromTrigger ? (new TaskSuccessEvent(this.moment) as TriggerEvent<string>) : new TriggerEvent(this.moment);
  }
}

// The exact form normalizeMoment produces for years 0000-9999 (luxon toISO in UTC /
// Date#toISOString): milliseconds always present, always `Z`.
const CANONICAL_LENGTH = '2030-05-01T12:00:00.000Z'.length;
const CANONICAL_ISO = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.\d{3}Z$/;

/** The canonical ISO string and epoch milliseconds of a moment, or an InvalidTriggerArgumentError. */
function normalizeMoment(value: unknown): [string, number] {
  if (typeof value === 'string') {
    // Fast path: the triggerer rebuilds triggers from the strings serialize() wrote, which are
    // already canonical; those are checked field by field (Date.parse alone accepts Feb 30) and
    // kept as they are.
    const fields = CANONICAL_ISO.exec(value);
    if (fields !== null && isCanonicalFields(fields)) {
      const ms = Date.parse(value);
      if (Number.isFinite(ms)) return [value, ms];
    }
    return normalizeWithLuxon(value);
  }
  if (value instanceof Date) {
    const ms = value.getTime();
    if (!Number.isFinite(ms)) throw invalidMoment(value, 'is an invalid Date');
    return [value.toISOString(), ms];
  }
  if (DateTime.isDateTime(value)) {
    if (!value.isValid) throw invalidMoment(value, 'is an invalid luxon DateTime');
    const iso = value.toUTC().toISO();
    const ms = value.toMillis();
    if (iso === null || !Number.isFinite(ms)) throw invalidMoment(value, 'cannot be written as ISO-8601');
    return [iso, ms];
  }
  if (typeof value === 'number') {
    throw invalidMoment(value, 'is a number, which is ambiguous (seconds or milliseconds?); for epoch milliseconds pass new Date(ms)');
  }
  throw invalidMoment(value, 'is not a moment');
}

function normalizeWithLuxon(value: string): [string, number] {
  const parsed = DateTime.fromISO(value, { setZone: true, zone: 'UTC' });
  if (!parsed.isValid) {
    const why = parsed.invalidExplanation ?? parsed.invalidReason ?? 'unparsable';
    throw invalidMoment(value, `is not a valid ISO-8601 date-time (${why})`);
  }
  // With setZone, an offset in the string wins over `zone`; a naive string takes `zone`. So a
  // naive string reads differently under two zones, and an aware one does not.
  const probe = DateTime.fromISO(value, { setZone: true, zone: 'UTC+1' });
  if (probe.offset !== parsed.offset) throw invalidMoment(value, 'is naive (it has no UTC offset or Z), so it names no single moment');
  const iso = parsed.toUTC().toISO();
  const ms = parsed.toMillis();
  if (iso === null || !Number.isFinite(ms)) throw invalidMoment(value, 'cannot be written as ISO-8601');
  return [iso, ms];
}

function isCanonicalFields(f: RegExpExecArray): boolean {
  const year = Number(f[1]);
  const month = Number(f[2]);
  const day = Number(f[3]);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return false;
  return Number(f[4]) <= 23 && Number(f[5]) <= 59 && Number(f[6]) <= 59;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

function invalidMoment(value: unknown, why: string): InvalidTriggerArgumentError {
  return new InvalidTriggerArgumentError('DateTimeTrigger', `moment ${describeValue(value)} ${why}; ${PASS_INSTEAD}`);
}

/** A short, readable rendering of a bad kwarg value for error messages. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return `${typeof value} ${String(value)}`;
  if (value === null || value === undefined) return String(value);
  if (value instanceof Date) return Number.isFinite(value.getTime()) ? `Date ${value.toISOString()}` : 'Date(Invalid Date)';
  if (DateTime.isDateTime(value)) {
    return value.isValid
      ? `DateTime ${value.toISO()}`
      : `DateTime(invalid: ${value.invalidReason}${value.invalidExplanation ? `, ${value.invalidExplanation}` : ''})`;
  }
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) {
    const json = JSON.stringify(value) ?? '[…]';
    return json.length <= 80 ? json : `${json.slice(0, 77)}…]`;
  }
  const name = (value as object).constructor?.name;
  return name && name !== 'Object' ? `an instance of ${name}` : 'an object';
}
