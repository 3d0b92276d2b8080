import type { Argv } from 'yargs';
import type { OptionTable, RawOptions } from '../config/option-table.ts';

/** Declares the table's flags on a yargs command, with env, unit and default in each help line. */
export function declareOptions(command: Argv, table: OptionTable): Argv {
  for (const [name, spec] of Object.entries(table)) {
    const isList = Array.isArray(spec.default);
    command.option(name, {
      // Numbers are taken as the text given and checked by the table's own parsers: yargs would
      // turn `--capacity abc` into NaN (and the message into "got null") and `2.0` into 2.
      type: isList ? 'array' : typeof spec.default === 'boolean' ? 'boolean' : 'string',
      string: isList ? true : undefined,
      describe: `${spec.describe} [${spec.unit}; env ${spec.env}; default ${isList || spec.default === '' ? 'none' : spec.default}]`,
    });
  }
  return command;
}

/** The table's flags as parsed by yargs, ready for optionPicker. */
export function rawOptionsFrom<Table extends OptionTable>(table: Table, args: Record<string, unknown>): RawOptions<Table> {
  return Object.fromEntries(Object.keys(table).map((name) => [name, args[name]])) as RawOptions<Table>;
}
