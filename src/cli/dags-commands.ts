import type { Argv } from 'yargs';
import { processDagFolder } from '../dags/dag-processor.ts';
import { triggerDagRun } from '../dags/manual-run.ts';
import { openDatabase } from '../db/connect.ts';
import { InvalidOptionError } from '../errors.ts';
import { assertJsonObject, type JsonObject } from '../serialization/json.ts';
import { TRIGGERER_OPTIONS } from '../triggerer/options.ts';
import { WORKER_OPTIONS } from '../worker/options.ts';
import { databaseUrlFrom } from './db-commands.ts';

/** `deferflow dags list | trigger | reserialize`: DAGs as the database knows them. */
export function registerDagsCommands(cli: Argv): void {
  cli.command('dags', 'DAG commands: list, trigger, reserialize', (dags) =>
    dags
      .option('db', { type: 'string', describe: `${TRIGGERER_OPTIONS.db.describe} [env ${TRIGGERER_OPTIONS.db.env}]` })
      .command(
        'list',
        'List the serialized DAGs and the DAG files that failed to load',
        (command) => command.option('json', { type: 'boolean', describe: 'One JSON object instead of a table' }),
        async (args) => {
          const database = openDatabase(databaseUrlFrom(args.db as string | undefined));
          try {
            const dagRows = await database.db.selectFrom('serialized_dag').select(['dag_id', 'fileloc', 'last_updated']).where('deleted_at', 'is', null).orderBy('dag_id').execute();
            const errors = await database.db.selectFrom('import_error').select(['fileloc', 'message']).orderBy('fileloc').execute();
            if (args.json) {
              process.stdout.write(`${JSON.stringify({ dags: dagRows, import_errors: errors })}\n`);
              return;
            }
            for (const row of dagRows) process.stdout.write(`${row.dag_id}\t${row.fileloc}\n`);
            for (const error of errors) process.stdout.write(`import error\t${error.fileloc}\t${error.message}\n`);
          } finally {
            await database.close();
          }
        },
      )
      .command(
        'trigger <dag-id>',
        'Create a manual DAG run (the scheduler then runs it); prints its run id',
        (command) =>
          command
            .positional('dag-id', { type: 'string', demandOption: true })
            .option('conf', { type: 'string', describe: 'The run conf, a JSON object' })
            .option('run-id', { type: 'string', describe: 'Default: manual__<logical date>' }),
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
          const database = openDatabase(databaseUrlFrom(args.db as string | undefined));
          try {
            const runId = await triggerDagRun(database, args.dagId!, { conf, runId: args.runId });
            process.stdout.write(`${runId}\n`);
          } finally {
            await database.close();
          }
        },
      )
      .command(
        'reserialize',
        'Process the DAG folder now: write serialized DAGs, mark deleted ones, record import errors',
        (command) => command.option('dags', { type: 'string', describe: `${WORKER_OPTIONS.dags.describe} [env ${WORKER_OPTIONS.dags.env}; default ${WORKER_OPTIONS.dags.default}]` }),
        async (args) => {
          const database = openDatabase(databaseUrlFrom(args.db as string | undefined));
          try {
            const folder = (args.dags as string | undefined) ?? process.env[WORKER_OPTIONS.dags.env] ?? WORKER_OPTIONS.dags.default;
            const result = await processDagFolder(database, folder);
            for (const [dagId, write] of Object.entries(result.written)) process.stdout.write(`${dagId}\t${write}\n`);
            for (const dagId of result.deleted) process.stdout.write(`${dagId}\tdeleted\n`);
            for (const error of result.errors) process.stdout.write(`import error\t${error.fileloc}\t${error.message}\n`);
            if (result.errors.length > 0) process.exitCode = 1;
          } finally {
            await database.close();
          }
        },
      )
      .demandCommand(1, 'name a dags command'),
  );
}
