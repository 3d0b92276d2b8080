import type { Argv } from 'yargs';
import { openMigratedDatabase } from './open-database.ts';
import { createLogger } from '../logging.ts';
import { BUILTIN_TRIGGERS } from '../../triggers/index.ts';
import { TriggerRegistry } from '../triggers/registry.ts';
import { declareOptions, rawOptionsFrom } from '../config/option-table.ts';
import { runUntilSignalled } from './daemon.ts';
import { resolveTriggererOptions, TRIGGERER_OPTIONS } from '../triggerer/options.ts';
import { Triggerer } from '../triggerer/triggerer.ts';

/** Hard stop if a graceful one has not finished by then (a hung database, say). */
const SHUTDOWN_DEADLINE_MS = 5_000;

export function registerTriggererCommand(cli: Argv): void {
  cli.command(
    'triggerer',
    'Run the triggerer: claim deferred tasks\' triggers and run them until they fire',
    (command) => declareOptions(command, TRIGGERER_OPTIONS),
    async (args) => {
      const options = resolveTriggererOptions(rawOptionsFrom(TRIGGERER_OPTIONS, args));
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'triggerer' });
      const registry = new TriggerRegistry(BUILTIN_TRIGGERS);
      for (const module of options.triggerModules) {
        const classpaths = await registry.loadModule(module);
        log.info({ module, classpaths }, `allowed triggers from ${module}: ${classpaths.join(', ')}`);
      }
      const database = await openMigratedDatabase(options.databaseUrl);
      const triggerer = new Triggerer(database, options, registry, log);
      await runUntilSignalled(log, database, triggerer, SHUTDOWN_DEADLINE_MS);
    },
  );
}
