import type { Argv } from 'yargs';
import { deferflowOptionsOf } from '../app/config.ts';
import { declareOptions, rawOptionsFrom, refusalsByFlag } from './declare-options.ts';
import { resolveSchedulerOptions, SCHEDULER_OPTIONS } from '../daemons/scheduler/options.ts';
import { resolveWorkerOptions, WORKER_OPTIONS } from '../daemons/worker/options.ts';
import { runUntilSignalled } from './daemon.ts';
import { resolveObservabilityHttp } from '../services/observability/options.ts';

/** `deferflow worker` and `deferflow scheduler`. */
export function registerRuntimeCommands(cli: Argv): void {
  cli.command(
    'worker',
    'Run a worker: process the DAG folder, claim scheduled task instances into slots, run and resume them',
    (command) => declareOptions(command, WORKER_OPTIONS),
    async (args) => {
      const raw = rawOptionsFrom(WORKER_OPTIONS, args);
      const [options, http] = refusalsByFlag([WORKER_OPTIONS], () => [resolveWorkerOptions(raw), resolveObservabilityHttp(raw, process.env)] as const);
      // The package entry, not app/deferflow.ts: loading it hands it (and the built-in triggers) to the
      // user code this process loads, so a DAG file's `deferflow` is this very module, not a second copy.
      const [{ Deferflow }, { createLogger }] = await Promise.all([import('../index.ts'), import('../vocabulary/logging.ts')]);
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'worker' });
      const app = await Deferflow.open(deferflowOptionsOf({ worker: options }, false, http), log);
      await runUntilSignalled(log, app, options.shutdownGraceMs + 5_000);
    },
  );

  cli.command(
    'scheduler',
    'Run the scheduler: move DAG runs through their tasks (from serialized DAGs, never DAG code)',
    (command) => declareOptions(command, SCHEDULER_OPTIONS),
    async (args) => {
      const raw = rawOptionsFrom(SCHEDULER_OPTIONS, args);
      const [options, http] = refusalsByFlag([SCHEDULER_OPTIONS], () => [resolveSchedulerOptions(raw), resolveObservabilityHttp(raw, process.env)] as const);
      // The package entry, not app/deferflow.ts: loading it hands it (and the built-in triggers) to the
      // user code this process loads, so a DAG file's `deferflow` is this very module, not a second copy.
      const [{ Deferflow }, { createLogger }] = await Promise.all([import('../index.ts'), import('../vocabulary/logging.ts')]);
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'scheduler' });
      const app = await Deferflow.open(deferflowOptionsOf({ scheduler: options }, false, http), log);
      await runUntilSignalled(log, app, 5_000);
    },
  );
}
