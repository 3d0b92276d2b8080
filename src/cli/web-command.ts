import type { Argv } from 'yargs';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { logFormat, logLevel } from '../vocabulary/logging.ts';
import { optionPicker } from '../vocabulary/options/option-table.ts';
import { describeThrown, InvalidOptionError } from '../vocabulary/errors.ts';
import { ObservabilityServer } from '../services/observability/http-server.ts';
import { Metrics } from '../services/observability/metrics.ts';
import { HTTP_OPTIONS, resolveObservabilityHttp } from '../services/observability/options.ts';
import { STANDALONE_HTTP_PORT } from '../app/standalone/options.ts';
import { resolveWebOptions, WEB_OPTIONS } from '../app/web/options.ts';
import { declareOptions, rawOptionsFrom, refusalsByFlag } from './declare-options.ts';
import { livenessThresholds } from '../daemons/liveness-options.ts';

/** `deferflow web` options: where the page is served, and the page's own. */
export const WEB_COMMAND_OPTIONS = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  host: HTTP_OPTIONS.host,
  port: { ...HTTP_OPTIONS.port, default: STANDALONE_HTTP_PORT, describe: 'Serve the status page (and /metrics, /health) on this port' },
  ...WEB_OPTIONS,
  logLevel: COMMON_OPTIONS.logLevel,
  logFormat: COMMON_OPTIONS.logFormat,
} as const;

/** `deferflow web`: the status page (read-only, with actions for the operator role), from the database alone, until SIGTERM or SIGINT. */
export function registerWebCommand(cli: Argv): void {
  cli.command(
    'web',
    'Serve the status page (daemons, triggers, deferred task instances, DAGs, runs, logs; actions with the operator token) from the database',
    (command) => declareOptions(command, WEB_COMMAND_OPTIONS),
    async (args) => {
      const raw = rawOptionsFrom(WEB_COMMAND_OPTIONS, args);
      const pick = optionPicker(WEB_COMMAND_OPTIONS, raw, process.env);
      const [http, web, logs] = refusalsByFlag([WEB_COMMAND_OPTIONS], () => {
        const served = resolveObservabilityHttp(raw, process.env, STANDALONE_HTTP_PORT);
        if (served === null) throw new InvalidOptionError('port', 'deferflow web serves the status page: give a port (0: any free one), not off');
        const logs = { level: logLevel(pick('logLevel')), format: logFormat(pick('logFormat')) };
        return [served, resolveWebOptions(raw, process.env, served.host), logs] as const;
      });
      const [{ createLogger }, { openMigratedDatabase }, { openStores }, { statusPages }, { readDatabaseFigures }, { livenessLocksOf }] = await Promise.all([
        import('../vocabulary/logging.ts'),
        import('../database/open-migrated-database.ts'),
        import('../storage/index.ts'),
        import('../app/web/status-pages.ts'),
        import('../services/observability/database-figures.ts'),
        import('../database/liveness-locks.ts'),
      ]);
      const log = createLogger({ level: logs.level, format: logs.format, name: 'web' });
      const database = await openMigratedDatabase(String(pick('databaseUrl')));
      const metrics = new Metrics();
      const storage = openStores(database);
      const thresholds = livenessThresholds();
      const locks = livenessLocksOf(database);
      metrics.databaseGauges(() => readDatabaseFigures(storage, locks, thresholds));
      const server = new ObservabilityServer(
        // Serving the page is all this command does: its port, even the default one, must be had.
        { ...http, optional: false },
        metrics,
        [],
        log,
        statusPages(database, { ...web, liveness: livenessThresholds() }),
      );
      try {
        await server.start();
      } catch (error) {
        await database.close();
        throw error;
      }
      const address = server.address!;
      process.stdout.write(`status page: http://${address.address}:${address.port}/\n`);
      let stopping = false;
      const stop = (signal: NodeJS.Signals) => {
        if (stopping) process.exit(1);
        stopping = true;
        log.info({ signal }, `received ${signal}; stopping`);
        void server
          .stop()
          .then(() => database.close())
          .then(
            () => process.exit(0),
            (error: unknown) => {
              log.error({ error: describeThrown(error).error }, 'stopping failed');
              process.exit(1);
            },
          );
      };
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
      await new Promise<never>(() => {});
    },
  );
}
