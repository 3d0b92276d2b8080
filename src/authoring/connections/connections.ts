import { UnknownConnectionError } from '../../vocabulary/errors.ts';

/**
 * Named connections, as Airflow's AIRFLOW_CONN_* are: the URL of an outside system (a database a
 * SqlSensor queries, an API an HttpSensor calls) in an environment variable, DEFERFLOW_CONN_<NAME>. A trigger row stores the
 * name only, never the URL: its secrets stay in the environment of the processes that use it.
 */
export const CONNECTION_ENV_PREFIX = 'DEFERFLOW_CONN_';

/** A named connection, read from a DEFERFLOW_CONN_<NAME> environment variable. */
export interface Connection {
  /** As given: letters, digits and `_`, case-insensitive (the variable is upper case). */
  readonly name: string;
  /** The connection's URL, password included (mask it with maskConnectionUrl before printing). */
  readonly url: string;
}

const NAME = /^[A-Za-z][A-Za-z0-9_]*$/;

/** Whether `value` is a name DEFERFLOW_CONN_<NAME> can define: letters, digits and "_", starting with a letter. */
export function isConnectionName(value: unknown): value is string {
  return typeof value === 'string' && NAME.test(value);
}

/** The connection `name` from the environment; DF_UNKNOWN_CONNECTION naming the variable to set. */
export function connectionFromEnv(name: string, env: NodeJS.ProcessEnv = process.env): Connection {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new UnknownConnectionError(`connection name ${JSON.stringify(name)} is not a name: letters, digits and "_", starting with a letter`);
  }
  const variable = `${CONNECTION_ENV_PREFIX}${name.toUpperCase()}`;
  const url = env[variable];
  if (url === undefined || url.trim() === '') {
    throw new UnknownConnectionError(
      `no connection ${JSON.stringify(name)}: set ${variable} to its URL in the environment of the processes that use it (the worker, the triggerer)`,
    );
  }
  return { name, url: url.trim() };
}

/** Every connection the environment defines, by name. */
export function listConnections(env: NodeJS.ProcessEnv = process.env): Connection[] {
  return Object.entries(env)
    .filter(([key, value]) => key.startsWith(CONNECTION_ENV_PREFIX) && key.length > CONNECTION_ENV_PREFIX.length && value !== undefined && value.trim() !== '')
    .map(([key, value]) => ({ name: key.slice(CONNECTION_ENV_PREFIX.length).toLowerCase(), url: value!.trim() }))
    .sort((a, b) => (a.name < b.name ? -1 : 1));
}

/**
 * The URL with its password, any `password=` parameter and any `__extra__` (an HTTP
 * connection's headers, tokens among them) masked: what may be printed or logged.
 */
export function maskConnectionUrl(url: string): string {
  return url
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@?#]+:)[^@/?#]*@/i, '$1***@')
    .replace(/([?&]password=)[^&#]*/gi, '$1***')
    .replace(/([?&]__extra__=)[^&#]*/gi, '$1***');
}
