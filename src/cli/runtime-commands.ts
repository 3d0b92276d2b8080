import type { Argv } from 'yargs';
import { declareOptions, rawOptionsFrom } from '../config/option-table.ts';
import { assertDagFolder, keepDagFolderProcessed, serializedDagSource } from '../dags/dag-processor.ts';
import { openMigratedDatabase } from './open-database.ts';
import { createLogger } from '../logging.ts';
import { Scheduler } from '../scheduler/scheduler.ts';
import { resolveSchedulerOptions, SCHEDULER_OPTIONS } from '../scheduler/options.ts';
import { dagFileResolver } from '../worker/dag-file-resolver.ts';
import { resolveWorkerOptions, WORKER_OPTIONS } from '../worker/options.ts';
import { Worker } from '../worker/worker.ts';
import { runUntilSignalled } from './daemon.ts';

/** `deferflow worker` and `deferflow scheduler`. */
export function registerRuntimeCommands(cli: Argv): void {
  cli.command(
    'worker',
    'Run a worker: process the DAG folder, claim scheduled task instances into slots, run and resume them',
    (command) => declareOptions(command, WORKER_OPTIONS),
    async (args) => {
      const options = resolveWorkerOptions(rawOptionsFrom(WORKER_OPTIONS, args));
      await assertDagFolder(options.dagsFolder);
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'worker' });
      const database = await openMigratedDatabase(options.databaseUrl);
      const worker = new Worker(database, options, dagFileResolver(database), log);
      // The worker imports DAG files anyway, so it keeps the serialized DAGs current.
      let dagProcessing: { stop(): void } | undefined;
      await runUntilSignalled(
        log,
        database,
        {
          start: async () => {
            dagProcessing = await keepDagFolderProcessed(database, options.dagsFolder, options.dagProcessIntervalMs, log);
            await worker.start();
          },
          stop: async () => {
            dagProcessing?.stop();
            await worker.stop();
          },
        },
        options.shutdownGraceMs + 5_000,
      );
    },
  );

  cli.command(
    'scheduler',
    'Run the scheduler: move DAG runs through their tasks (from serialized DAGs, never DAG code)',
    (command) => declareOptions(command, SCHEDULER_OPTIONS),
    async (args) => {
      const options = resolveSchedulerOptions(rawOptionsFrom(SCHEDULER_OPTIONS, args));
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'scheduler' });
      const database = await openMigratedDatabase(options.databaseUrl);
      const scheduler = new Scheduler(database, options, serializedDagSource(database), log);
      await runUntilSignalled(log, database, scheduler, 5_000);
    },
  );
}
