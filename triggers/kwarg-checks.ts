import { isConnectionName } from '../src/authoring/connections/connections.ts';
import { describeValue } from './date-time-trigger.ts';

/** A trigger's `connection` kwarg checked: a name DEFERFLOW_CONN_<NAME> can define, else `invalid` saying so. */
export function checkConnectionName(connection: unknown, invalid: (why: string) => Error): asserts connection is string {
  if (!isConnectionName(connection))
    throw invalid(`connection ${describeValue(connection)} is not a connection name (letters, digits, "_"; defined by DEFERFLOW_CONN_<NAME>)`);
}
