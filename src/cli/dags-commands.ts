import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import { formatTable, printListing } from './table.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { assertJsonObject, type JsonObject } from '../vocabulary/serialization/json.ts';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { WORKER_OPTIONS } from '../daemons/worker/options.ts';
import { withMigratedDatabase, withStorage } from './db-commands.ts';
import { positiveInteger } from '../vocabulary/options/option-table.ts';
import { DAG_RUN_STATES, type DagRunState } from '../database/schema.ts';

/** `dags pause` / `dags unpause`: one line saying what changed; DF_INVALID_OPTION naming a DAG the database does not have. */
async function setPaused(dbUrl: string | undefined, dagId: string, paused: boolean): Promise<void> {
  const { OperatorActions, cliActor } = await import('../services/operator-actions.ts');
  await withMigratedDatabase(dbUrl, async (database) => {
    await new OperatorActions(database, cliActor()).setPaused(dagId, paused);
    process.stdout.write(`DAG ${dagId} ${paused ? 'paused' : 'unpaused'}\n`);
  });
}

/** `deferflow dags list | runs | trigger | reserialize | pause | unpause`: DAGs as the database knows them. */
export function registerDagsCommands(cli: Argv): void {
  cli.command('dags', 'DAG commands: list, runs, trigger, reserialize, pause, unpause', (dags) =>
    dags
      .option('db', { type: 'string', describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}]` })
      .command(
        'list',
        'List the serialized DAGs and the DAG files that failed to load',
        (command) => command.option('json', { type: 'boolean', describe: 'One JSON object instead of a table' }),
        async (args) => {
          const { describeSchedule } = await import('../model/schedule.ts');
          await withStorage(args.db, async (storage) => {
            const dagRows = (await storage.serializedDags.listSerializedDags()).map((row) => ({
              dag_id: row.dagId,
              fileloc: row.fileloc,
              schedule: describeSchedule(JSON.parse(row.dataJson)?.dag?.schedule),
              paused: row.paused,
            }));
            const errors = await storage.serializedDags.listImportErrors();
            const watchers = (await storage.serializedDags.listDagWatchers()).map((watcher) => ({
              dag_id: watcher.dagId,
              trigger_id: watcher.triggerId,
              classpath: watcher.classpath,
              queue: watcher.queue,
              triggerer_id: watcher.triggererId,
              cursor: watcher.cursor === null ? null : (JSON.parse(watcher.cursor) as unknown),
              last_event_at: watcher.lastEventAt === null ? null : new Date(watcher.lastEventAt).toISOString(),
              event_filters: watcher.eventFilters,
            }));
            if (args.json) {
              process.stdout.write(`${JSON.stringify({ dags: dagRows, watchers, import_errors: errors })}\n`);
              return;
            }
            process.stdout.write(
              dagRows.length === 0
                ? 'no DAGs\n'
                : formatTable(
                    ['DAG ID', 'SCHEDULE', 'PAUSED', 'FILE'],
                    dagRows.map((row) => [row.dag_id, row.schedule ?? 'manual', row.paused ? 'yes' : 'no', row.fileloc]),
                  ),
            );
            if (watchers.length > 0)
              process.stdout.write(
                `\n${formatTable(
                  ['WATCHED BY', 'TRIGGER', 'CLASSPATH', 'QUEUE', 'TRIGGERER', 'CURSOR', 'LAST EVENT', 'EVENTS TAKEN'],
                  watchers.map((watcher) => [
                    watcher.dag_id,
                    String(watcher.trigger_id),
                    watcher.classpath,
                    watcher.queue,
                    watcher.triggerer_id === null ? 'unclaimed' : String(watcher.triggerer_id),
                    watcher.cursor === null ? '-' : JSON.stringify(watcher.cursor),
                    watcher.last_event_at ?? '-',
                    watcher.event_filters === null ? 'all' : watcher.event_filters.map((filter) => JSON.stringify(filter)).join(' or '),
                  ]),
                )}`,
              );
            if (errors.length > 0)
              process.stdout.write(
                `\n${formatTable(
                  ['IMPORT ERROR IN', 'ERROR'],
                  errors.map((error) => [error.fileloc, error.message]),
                )}`,
              );
          });
        },
      )
      .command(
        'trigger <dag-id>',
        'Create a manual DAG run (the scheduler then runs it); prints its run id',
        (command) =>
          command
            .positional('dag-id', { type: 'string', demandOption: true })
            .option('conf', { type: 'string', describe: 'The run conf, a JSON object' })
            .option('run-id', { type: 'string', describe: 'Default: manual__<logical date>' })
            .option('logical-date', { type: 'string', describe: "The run's logical date, ISO-8601 with an offset or Z. Default: now" }),
        async (args) => {
          let conf: JsonObject = {};
          if (args.conf !== undefined) {
            try {
              conf = JSON.parse(args.conf) as JsonObject;
            } catch {
              throw new InvalidOptionError('conf', `is not JSON: ${args.conf}`);
            }
            assertJsonObject(conf, 'conf');
          }
          const { OperatorActions, cliActor } = await import('../services/operator-actions.ts');
          await withMigratedDatabase(args.db, async (database) => {
            const runId = await new OperatorActions(database, cliActor()).triggerRun(args.dagId!, { conf, runId: args.runId, logicalDate: args.logicalDate });
            process.stdout.write(`${runId}\n`);
          });
        },
      )
      .command(
        'pause <dag-id>',
        'Pause a DAG: no scheduled, signal or event runs (manual runs still run); its watchers stop, keeping their cursors',
        (command) => command.positional('dag-id', { type: 'string', demandOption: true }),
        (args) => setPaused(args.db, args.dagId!, true),
      )
      .command(
        'unpause <dag-id>',
        'Unpause a DAG: its schedule and its watchers run again (watchers from their cursors)',
        (command) => command.positional('dag-id', { type: 'string', demandOption: true }),
        (args) => setPaused(args.db, args.dagId!, false),
      )
      .command(
        'runs [dag-id]',
        'List DAG runs, newest first',
        (command) =>
          command
            .positional('dag-id', { type: 'string', describe: 'Only the runs of this DAG' })
            .option('state', { type: 'string', choices: [...DAG_RUN_STATES], describe: 'Only runs in this state' })
            // A string, checked by positiveInteger: yargs would turn `--limit ten` into NaN and the message into "got null".
            .option('limit', numberFlag('integer', 'Most runs listed', 25))
            .option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          const limit = positiveInteger(args.limit, 'limit');
          await withStorage(args.db, async (storage, database) => {
            const runs = await storage.dagRuns.listDagRuns({ dagId: args.dagId, state: args.state as DagRunState | undefined, limit });
            // No runs of a DAG the database has never heard of: most likely a mistyped id, not an idle DAG.
            if (runs.length === 0 && args.dagId !== undefined) {
              // Without --state the list just read already says the DAG has no run at all.
              const anyRun = args.state === undefined ? runs : await storage.dagRuns.listDagRuns({ dagId: args.dagId, limit: 1 });
              if (anyRun.length === 0 && (await storage.serializedDags.readSerializedDag(args.dagId)) === null) {
                const { unknownDagError } = await import('../services/dags/unknown-dag.ts');
                throw await unknownDagError(database, args.dagId, 'dag-id');
              }
            }
            const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
            const rows = runs.map((run) => ({
              dag_id: run.dagId,
              run_id: run.runId,
              run_type: run.runType,
              state: run.state,
              logical_date: iso(run.logicalDate),
              start_date: iso(run.startDate),
              end_date: iso(run.endDate),
            }));
            printListing(rows, {
              json: args.json,
              empty: `no DAG runs${args.dagId ? ` of ${args.dagId}` : ''}${args.state ? ` in state ${args.state}` : ''}`,
              headers: ['DAG ID', 'RUN ID', 'TYPE', 'STATE', 'LOGICAL DATE', 'STARTED', 'ENDED'],
              cells: (row) => [row.dag_id, row.run_id, row.run_type, row.state, row.logical_date ?? '-', row.start_date ?? '-', row.end_date ?? '-'],
            });
          });
        },
      )
      .command(
        'reserialize',
        'Process the DAG folder now: write serialized DAGs, mark deleted ones, record import errors',
        (command) =>
          command
            .option('dags', {
              type: 'string',
              describe: `${WORKER_OPTIONS.dagsFolder.describe} [env ${WORKER_OPTIONS.dagsFolder.env}; default ${WORKER_OPTIONS.dagsFolder.default}]`,
            })
            .option('remove-missing', {
              type: 'boolean',
              describe:
                'Mark deleted the DAGs of files not found even when the folder holds none of the files processed before (refused otherwise: a wrong --dags)',
            }),
        async (args) => {
          // The package entry too, which hands itself to the DAG files this loads (see standalone).
          const [, { processDagFolder }] = await Promise.all([import('../index.ts'), import('../services/dags/dag-processor.ts')]);
          await withMigratedDatabase(args.db, async (database) => {
            const folder = (args.dags as string | undefined) ?? process.env[WORKER_OPTIONS.dagsFolder.env] ?? WORKER_OPTIONS.dagsFolder.default;
            const result = await processDagFolder(database, folder, { removeMissing: args['remove-missing'] === true });
            const changes = [...Object.entries(result.written), ...result.deleted.map((dagId) => [dagId, 'deleted'] as const)].sort(([a], [b]) =>
              a < b ? -1 : 1,
            );
            process.stdout.write(
              changes.length === 0
                ? 'no DAGs\n'
                : formatTable(
                    ['DAG ID', 'RESULT'],
                    changes.map(([dagId, what]) => [dagId, what]),
                  ),
            );
            if (result.errors.length > 0)
              process.stdout.write(
                `\n${formatTable(
                  ['IMPORT ERROR IN', 'ERROR'],
                  result.errors.map((error) => [error.fileloc, error.message]),
                )}`,
              );
            if (result.errors.length > 0) process.exitCode = 1;
          });
        },
      )
      .demandCommand(1, 'name a dags command'),
  );
}
