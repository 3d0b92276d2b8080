import type { Argv } from 'yargs';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { flagOf, flagsOf, type OptionSpec, type OptionTable, type RawOptions } from '../vocabulary/options/option-table.ts';

/** Declares the table's flags (each field's, in kebab case) on a yargs command, with env, unit and default in each help line. */
export function declareOptions(command: Argv, table: OptionTable): Argv {
  for (const { flag: name, spec } of flagsOf(table)) {
    const isList = Array.isArray(spec.default);
    const isNumber = typeof spec.default === 'number';
    command.option(name, {
      // Numbers are taken as the text given and checked by the table's own parsers: yargs would
      // turn `--capacity abc` into NaN (and the message into "got null") and `2.0` into 2. So a
      // number is declared with no type (main() turns yargs' number parsing off), which also
      // keeps yargs from labelling it [string] in --help: its kind is said with its unit instead.
      type: isList ? 'array' : typeof spec.default === 'boolean' ? 'boolean' : isNumber ? undefined : 'string',
      string: isList ? true : undefined,
      requiresArg: isNumber ? true : undefined,
      describe: `${spec.describe} [${isNumber ? `${numberKind(spec)}, ` : ''}${spec.unit}; env ${spec.env}; default ${isList || spec.default === '' ? 'none' : spec.default}]`,
    });
  }
  return command;
}

/**
 * A flag of one command that takes a number (or a duration): kept as the text given, for the
 * command's own parser, and shown in --help as what it is rather than as yargs' [string].
 */
export function numberFlag(kind: 'integer' | 'duration', describe: string, defaultValue?: number) {
  return { requiresArg: true, describe: `${describe} [${kind}]`, ...(defaultValue === undefined ? {} : { default: defaultValue }) } as const;
}

/** What kind of number a flag takes, for --help: a duration (in its unit), a whole number, or any number. */
function numberKind(spec: OptionSpec): string {
  if (spec.unit === 'seconds' || spec.unit === 'milliseconds') return 'duration';
  return Number.isInteger(spec.default) ? 'integer' : 'number';
}

/** The table's flags as yargs parsed them, keyed by field for the table's resolver. */
export function rawOptionsFrom<Table extends OptionTable>(table: Table, args: Record<string, unknown>): RawOptions<Table> {
  return Object.fromEntries(flagsOf(table).map(({ field, flag }) => [field, args[flag]])) as RawOptions<Table>;
}

/**
 * Runs `resolve`, naming a refused option by its flag: the resolvers name the typed field
 * (`heartbeatInterval`), and on a command line the flag (`heartbeat-interval`) is what was typed.
 */
export function refusalsByFlag<T>(tables: readonly OptionTable[], resolve: () => T): T {
  try {
    return resolve();
  } catch (error) {
    if (!(error instanceof InvalidOptionError)) throw error;
    const spec = tables.find((table) => Object.hasOwn(table, error.option))?.[error.option];
    throw spec === undefined ? error : error.renamed(flagOf(error.option, spec));
  }
}
