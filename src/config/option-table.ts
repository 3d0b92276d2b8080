import type { Argv } from 'yargs';
import { InvalidOptionError } from '../errors.ts';

/**
 * The shape every command's options table has (the triggerer's, the worker's, the
 * scheduler's): a flag name maps to its environment variable, default, unit and help text. A
 * flag wins over its environment variable, which wins over the default.
 */
export interface OptionSpec {
  readonly env: string;
  readonly default: string | number | boolean | readonly string[];
  readonly unit: string;
  readonly describe: string;
}

export type OptionTable = Readonly<Record<string, OptionSpec>>;
export type RawOptions<Table extends OptionTable> = Partial<Record<keyof Table & string, string | number | boolean | readonly string[] | undefined>>;

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

/** Declares the table's flags on a yargs command, with env, unit and default in each help line. */
export function declareOptions(command: Argv, table: OptionTable): Argv {
  for (const [name, spec] of Object.entries(table)) {
    const isList = Array.isArray(spec.default);
    command.option(name, {
      type: isList ? 'array' : typeof spec.default === 'number' ? 'number' : typeof spec.default === 'boolean' ? 'boolean' : 'string',
      string: isList ? true : undefined,
      describe: `${spec.describe} [${spec.unit}; env ${spec.env}; default ${isList ? 'none' : spec.default}]`,
    });
  }
  return command;
}

/** The table's flags as parsed by yargs, ready for optionPicker. */
export function rawOptionsFrom<Table extends OptionTable>(table: Table, args: Record<string, unknown>): RawOptions<Table> {
  return Object.fromEntries(Object.keys(table).map((name) => [name, args[name]])) as RawOptions<Table>;
}

export function positiveInteger(value: unknown, name: string): number {
  const number = toNumber(value);
  if (!Number.isInteger(number) || number <= 0) {
    throw new InvalidOptionError(name, `expected a positive integer, got ${JSON.stringify(value)}`);
  }
  return number;
}

export function positiveNumber(value: unknown, name: string): number {
  const number = toNumber(value);
  if (!Number.isFinite(number) || number <= 0) {
    throw new InvalidOptionError(name, `expected a positive number, got ${JSON.stringify(value)}`);
  }
  return number;
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

function toNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/.test(value)) return Number(value);
  return Number.NaN;
}
