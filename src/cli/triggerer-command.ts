import type { Argv } from 'yargs';
import { deferflowOptionsOf } from '../app/config.ts';
import { declareOptions, rawOptionsFrom, refusalsByFlag } from './declare-options.ts';
import { resolveTriggererOptions, TRIGGERER_OPTIONS, TRIGGERER_SIGNAL_HTTP_PORT } from '../daemons/triggerer/options.ts';
import { runUntilSignalled } from './daemon.ts';
import { resolveObservabilityHttp } from '../services/observability/options.ts';

/** Hard stop if a graceful one has not finished by then (a hung database, say). */
const SHUTDOWN_DEADLINE_MS = 5_000;

export function registerTriggererCommand(cli: Argv): void {
  cli.command(
    'triggerer',
    "Run the triggerer: claim deferred tasks' triggers and run them until they fire",
    (command) => declareOptions(command, TRIGGERER_OPTIONS),
    async (args) => {
      const raw = rawOptionsFrom(TRIGGERER_OPTIONS, args);
      const [options, http] = refusalsByFlag([TRIGGERER_OPTIONS], () => {
        const resolved = resolveTriggererOptions(raw);
        // With a signal token, the endpoint that serves POST /signals/:key is on unless told off.
        return [resolved, resolveObservabilityHttp(raw, process.env, resolved.signalHttpToken ? TRIGGERER_SIGNAL_HTTP_PORT : 'off')] as const;
      });
      // The package entry, not app/deferflow.ts: loading it hands it (and the built-in triggers) to the
      // user code this process loads, so a DAG file's `deferflow` is this very module, not a second copy.
      const [{ Deferflow }, { createLogger }] = await Promise.all([import('../index.ts'), import('../vocabulary/logging.ts')]);
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'triggerer' });
      const app = await Deferflow.open(deferflowOptionsOf({ triggerer: options }, false, http), log);
      await runUntilSignalled(log, app, SHUTDOWN_DEADLINE_MS);
    },
  );
}
