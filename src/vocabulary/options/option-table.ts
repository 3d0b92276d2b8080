import { Duration } from 'luxon';
import { InvalidOptionError } from '../errors.ts';

/**
 * One option of a typed options object, keyed by its field (`heartbeatInterval`): the typed
 * config interfaces (src/app/config.ts, each field's meaning and `@default` in JSDoc) name the
 * same fields, checked by the compiler there. The CLI flag (`--heartbeat-interval`) is the field
 * in kebab case unless `flag` says otherwise, and the environment variable is `env`. A flag wins
 * over its environment variable, which wins over the default.
 */
export interface OptionSpec {
  /** The CLI flag, when it is not the field in kebab case (`databaseUrl` is `--db`). */
  readonly flag?: string;
  readonly env: string;
  readonly default: string | number | boolean | readonly string[];
  readonly unit: string;
  readonly describe: string;
}

export type OptionTable = Readonly<Record<string, OptionSpec>>;
export type RawOptions<Table extends OptionTable> = Partial<Record<keyof Table & string, string | number | boolean | readonly string[] | undefined>>;

/** The CLI flag of a field (`pollInterval` → `poll-interval`, or the spec's own `flag`). */
export function flagOf(field: string, spec: OptionSpec): string {
  return spec.flag ?? field.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);
}

/** The table's fields with their flags, in the table's order. */
export function flagsOf(table: OptionTable): { readonly field: string; readonly flag: string; readonly spec: OptionSpec }[] {
  return Object.entries(table).map(([field, spec]) => ({ field, flag: flagOf(field, spec), spec }));
}

/** The raw value of `name`: the flag, else its environment variable, else the default. */
export function optionPicker<Table extends OptionTable>(table: Table, raw: RawOptions<Table>, env: NodeJS.ProcessEnv) {
  return (name: keyof Table & string): unknown => {
    const given = raw[name];
    if (given !== undefined && !(Array.isArray(given) && given.length === 0)) return given;
    const fromEnv = env[table[name]!.env];
    if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
    return table[name]!.default;
  };
}

/** A whole number above zero: a number, or text spelling one in digits (`12`, not `12.0`, `1e3` or `0x10`). */
export function positiveInteger(value: unknown, name: string): number {
  const number = numberSpelled(value, INTEGER_TEXT);
  if (!Number.isSafeInteger(number) || number <= 0) {
    throw new InvalidOptionError(name, `expected a positive integer, got ${given(value)}`);
  }
  return number;
}

/** A finite number above zero: a number, or text spelling one in decimal (`0.5`, `2`, `1e3`). */
export function positiveNumber(value: unknown, name: string): number {
  const number = numberSpelled(value, DECIMAL_TEXT);
  if (!Number.isFinite(number) || number <= 0) {
    throw new InvalidOptionError(name, `expected a positive number, got ${given(value)}`);
  }
  return number;
}

/** `value` as a number: a number as it is, text only when `spelling` matches it, else NaN. */
function numberSpelled(value: unknown, spelling: RegExp): number {
  if (typeof value === 'number') return value;
  return typeof value === 'string' && spelling.test(value) ? Number(value) : Number.NaN;
}

const INTEGER_TEXT = /^\s*\+?\d+\s*$/;
const DECIMAL_TEXT = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;

/** What was given, as the user wrote it: text quoted, numbers (NaN too) as they print. */
function given(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return `${value.length} values (${value.map(given).join(', ')}); give it once`;
  return typeof value;
}

/** A number of seconds, zero or more (zero: at once), in milliseconds. */
export function nonNegativeSeconds(value: unknown, name: string): number {
  const number = numberSpelled(value, DECIMAL_TEXT);
  if (!Number.isFinite(number) || number < 0) {
    throw new InvalidOptionError(name, `expected zero or a positive number of seconds, got ${given(value)}`);
  }
  return Math.round(number * 1000);
}

/** A positive number of seconds, in milliseconds. */
export function seconds(value: unknown, name: string): number {
  return Math.round(positiveNumber(value, name) * 1000);
}

/** A flag: true/false (also 1/0, yes/no, as environment variables spell them). */
export function flag(value: unknown, name: string): boolean {
  if (typeof value === 'boolean') return value;
  const text = String(value).trim().toLowerCase();
  if (['true', '1', 'yes'].includes(text)) return true;
  if (['false', '0', 'no'].includes(text)) return false;
  throw new InvalidOptionError(name, `expected true or false, got ${JSON.stringify(value)}`);
}

export function oneOf<T extends string>(value: unknown, name: string, allowed: readonly T[]): T {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  throw new InvalidOptionError(name, `expected one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
}

const DURATION_UNITS_MS = { w: 7 * 86_400_000, d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const;

/**
 * A length of time as people type it on a command line, in milliseconds: `30d`, `12h`, `90m`,
 * `45s`, `2w` (one unit), a number of seconds, or an ISO-8601 duration (`P30D`, `PT12H`).
 */
export function durationText(value: unknown, name: string): number {
  const text = typeof value === 'string' ? value.trim() : typeof value === 'number' ? String(value) : '';
  const short = /^(\d+(?:\.\d+)?)([wdhms])$/.exec(text);
  let ms = Number.NaN;
  if (short) ms = Number(short[1]) * DURATION_UNITS_MS[short[2] as keyof typeof DURATION_UNITS_MS];
  else if (/^\d+(?:\.\d+)?$/.test(text)) ms = Number(text) * 1000;
  else if (/^P/i.test(text)) {
    const parsed = Duration.fromISO(text.toUpperCase());
    if (parsed.isValid) ms = parsed.toMillis();
  }
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new InvalidOptionError(
      name,
      `expected a length of time such as 30d, 12h, 90m, 45s, 2w, a number of seconds or an ISO-8601 duration (P30D), got ${given(value)}`,
    );
  }
  return Math.round(ms);
}

/** A TCP port to listen on: 1-65535, or 0 for any free one. */
export function listenPort(value: unknown, name: string): number {
  if (value === 0 || (typeof value === 'string' && value.trim() === '0')) return 0;
  const number = numberSpelled(value, INTEGER_TEXT);
  if (!Number.isSafeInteger(number) || number <= 0 || number > 65535) {
    throw new InvalidOptionError(name, `expected a port (1-65535, or 0 for any free one), got ${given(value)}`);
  }
  return number;
}

/** A host or address to listen on, not empty. */
export function listenHost(value: unknown, name: string): string {
  const text = String(value ?? '').trim();
  if (text === '') throw new InvalidOptionError(name, 'is empty: give a host or address, e.g. 127.0.0.1');
  return text;
}
