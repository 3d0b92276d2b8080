import type { Argv } from 'yargs';
import { openDatabase } from '../db/connect.ts';
import { describeThrown } from '../errors.ts';
import { createLogger } from '../logging.ts';
import { BUILTIN_TRIGGERS } from '../../triggers/index.ts';
import { TriggerRegistry } from '../triggers/registry.ts';
import { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptionName } from '../triggerer/options.ts';
import { Triggerer } from '../triggerer/triggerer.ts';

/** Hard stop if a graceful one has not finished by then (a hung database, say). */
const SHUTDOWN_DEADLINE_MS = 5_000;

export function registerTriggererCommand(cli: Argv): void {
  cli.command(
    'triggerer',
    'Run the triggerer: claim deferred tasks\' triggers and run them until they fire',
    (command) => {
      for (const [name, spec] of Object.entries(TRIGGERER_OPTIONS)) {
        const isList = Array.isArray(spec.default);
        command.option(name, {
          type: isList ? 'array' : typeof spec.default === 'number' ? 'number' : 'string',
          string: isList ? true : undefined,
          describe: `${spec.describe} [${spec.unit}; env ${spec.env}; default ${isList ? 'none' : spec.default}]`,
        });
      }
      return command;
    },
    async (args) => {
      const raw = Object.fromEntries(Object.keys(TRIGGERER_OPTIONS).map((name) => [name, args[name]])) as Record<TriggererOptionName, never>;
      const options = resolveTriggererOptions(raw);
      const log = createLogger({ level: options.logLevel, format: options.logFormat, name: 'triggerer' });
      const registry = new TriggerRegistry(BUILTIN_TRIGGERS);
      for (const module of options.triggerModules) {
        const classpaths = await registry.loadModule(module);
        log.info({ module, classpaths }, `allowed triggers from ${module}: ${classpaths.join(', ')}`);
      }
      // One broken trigger must not take the others down: a throw escaping a trigger's own
      // callbacks is logged, and the daemon goes on.
      process.on('uncaughtException', (error) => log.error({ error: describeThrown(error) }, 'uncaught exception (a trigger callback threw); continuing'));
      process.on('unhandledRejection', (reason) => log.error({ error: describeThrown(reason) }, 'unhandled rejection; continuing'));

      const database = openDatabase(options.databaseUrl);
      const triggerer = new Triggerer(database, options, registry, log);
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals) => {
        signals++;
        if (signals > 1) {
          log.warn({ signal }, `second ${signal}: exiting at once`);
          process.exit(1);
        }
        log.info({ signal }, `received ${signal}; stopping gracefully (send it again to exit at once)`);
        setTimeout(() => {
          log.error('graceful stop took too long; exiting');
          process.exit(1);
        }, SHUTDOWN_DEADLINE_MS).unref();
        void triggerer
          .stop()
          .then(() => database.close())
          .then(() => process.exit(0));
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
      await triggerer.start();
      // The process now lives on the triggerer's timers until a signal stops it.
      await new Promise<never>(() => {});
    },
  );
}
