import { COMMON_OPTIONS, ENCRYPTION_KEYS_ENV } from '../daemons/common-options.ts';
import type { OptionTable } from '../vocabulary/options/option-table.ts';
import { closestName } from '../vocabulary/suggest.ts';
import { CONNECTION_ENV_PREFIX } from '../authoring/connections/connections.ts';
import { HTTP_OPTIONS } from '../services/observability/options.ts';
import { SCHEDULER_OPTIONS } from '../daemons/scheduler/options.ts';
import { STANDALONE_OPTIONS } from '../app/standalone/options.ts';
import { TRIGGERER_OPTIONS } from '../daemons/triggerer/options.ts';
import { WEB_OPTIONS } from '../app/web/options.ts';
import { WORKER_OPTIONS } from '../daemons/worker/options.ts';
import { RUNNER_PRELOAD_ENV, RUNNER_SMART_SENSORS_ENV } from '../daemons/worker/runner-protocol.ts';

const PREFIX = 'DEFERFLOW_';

/** Variables earlier versions read, with what replaced them: a deployment that still sets one is told. */
export const RETIRED_VARIABLES: Readonly<Record<string, string>> = {
  DEFERFLOW_SIGNAL_HTTP_PORT:
    "POST /signals/:key is served on the process's HTTP endpoint: set DEFERFLOW_HTTP_PORT (the triggerer's default with a signal token is 8795)",
  DEFERFLOW_SIGNAL_HTTP_HOST: "POST /signals/:key is served on the process's HTTP endpoint: set DEFERFLOW_HTTP_HOST",
};

/**
 * Every environment variable deferflow reads: each option table's, the keys (never a flag:
 * `ps` would show them), and the one a worker sets for its task runners. A connection's
 * (DEFERFLOW_CONN_<NAME>) is named by the user and never counts as mistyped.
 */
export function knownVariables(): Set<string> {
  const tables: OptionTable[] = [COMMON_OPTIONS, HTTP_OPTIONS, WEB_OPTIONS, WORKER_OPTIONS, SCHEDULER_OPTIONS, TRIGGERER_OPTIONS, STANDALONE_OPTIONS];
  return new Set([
    ...tables.flatMap((table) => Object.values(table).map((spec) => spec.env)),
    ENCRYPTION_KEYS_ENV,
    RUNNER_SMART_SENSORS_ENV,
    RUNNER_PRELOAD_ENV,
  ]);
}

/**
 * A warning for each DEFERFLOW_ variable set that deferflow does not read but that looks like a
 * typo of one it does (`DEFERFLOW_TRIGERER_CAPACITY`): it would be ignored without a word, and
 * the daemon would run on the default. Variables unlike any of deferflow's are the user's own
 * business and pass in silence.
 */
export function mistypedVariableWarnings(env: NodeJS.ProcessEnv): string[] {
  const known = knownVariables();
  const knownSuffixes = [...known].map((name) => name.slice(PREFIX.length));
  return Object.keys(env)
    .filter((name) => name.startsWith(PREFIX) && !known.has(name) && !name.startsWith(CONNECTION_ENV_PREFIX))
    .flatMap((name) => {
      const retired = RETIRED_VARIABLES[name];
      if (retired !== undefined) return [`warning: ${name} is no longer read and is ignored; ${retired}`];
      const meant = closestName(name.slice(PREFIX.length), knownSuffixes);
      return meant ? [`warning: ${name} is not a deferflow variable and is ignored; did you mean ${PREFIX}${meant}?`] : [];
    });
}
