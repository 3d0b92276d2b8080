import { isConnectionName } from '../src/authoring/connections/connections.ts';
import { describeValue } from './date-time-trigger.ts';

/** A trigger's `connection` kwarg checked: a name DEFERFLOW_CONN_<NAME> can define, else `invalid` saying so. */
export function checkConnectionName(connection: unknown, invalid: (why: string) => Error): asserts connection is string {
  if (!isConnectionName(connection))
    throw invalid(`connection ${describeValue(connection)} is not a connection name (letters, digits, "_"; defined by DEFERFLOW_CONN_<NAME>)`);
}

/**
 * A trigger's kwargs checked for their shape: an object (else `invalid` names what came, after
 * `expected`) holding only `known` fields (else `invalid` names the first other one and the fields there are).
 */
export function checkKwargFields(kwargs: unknown, expected: string, known: readonly string[], invalid: (why: string) => Error): asserts kwargs is object {
  if (kwargs === null || typeof kwargs !== 'object') throw invalid(`expected ${expected}, got ${describeValue(kwargs)}`);
  for (const key of Object.keys(kwargs)) if (!known.includes(key)) throw invalid(`unknown field ${JSON.stringify(key)} (the fields are ${known.join(', ')})`);
}

/** The most messages or rows a broker or table trigger reads at once. */
const MAX_BATCH = 10_000;

/** A `batch` kwarg (messages or rows read at once) checked: a whole number from 1 to 10,000, else `invalid` saying so. */
export function checkBatch(batch: unknown, invalid: (why: string) => Error): asserts batch is number {
  if (!Number.isInteger(batch) || (batch as number) < 1 || (batch as number) > MAX_BATCH)
    throw invalid(`batch ${describeValue(batch)} is not a whole number from 1 to ${MAX_BATCH}`);
}

/** A broker trigger's `shared` kwarg checked (true or false, else `invalid` saying so); absent, false. */
export function sharedFlag(shared: unknown, invalid: (why: string) => Error): boolean {
  if (shared !== undefined && typeof shared !== 'boolean') throw invalid(`shared ${describeValue(shared)} is not true or false`);
  return shared ?? false;
}
