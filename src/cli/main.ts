import yargs, { type Argv } from 'yargs';
import { DEFERFLOW_ERROR_EXIT, formatCliError } from './cli-errors.ts';
import { registerConnectionsCommands } from './connections-commands.ts';
import { registerSignalCommands } from './signal-commands.ts';
import { registerDbCommands } from './db-commands.ts';
import { registerInitCommand } from './init-command.ts';
import { ownPackage } from './own-package.ts';
import { registerJobsCommands } from './jobs-commands.ts';
import { registerDagsCommands } from './dags-commands.ts';
import { registerRuntimeCommands } from './runtime-commands.ts';
import { registerStandaloneCommand } from './standalone-command.ts';
import { registerTasksCommands } from './tasks-commands.ts';
import { registerTriggererCommand } from './triggerer-command.ts';
import { registerTriggersCommands } from './triggers-commands.ts';
import { registerWebCommand } from './web-command.ts';

/** Runs the deferflow CLI with `argv` (without node and the script). */
export async function main(argv: readonly string[]): Promise<void> {
  const cli: Argv = yargs([...argv])
    .scriptName('deferflow')
    .usage('$0 <command> [options]')
    .strict()
    .demandCommand(1, 'name a command')
    .recommendCommands()
    .wrap(Math.min(110, process.stdout.columns ?? 110))
    .fail((message, error) => {
      if (error) {
        process.stderr.write(`${formatCliError(error)}\n`);
      } else {
        process.stderr.write(`error: ${message}\nrun with --help for usage\n`);
      }
      process.exit(DEFERFLOW_ERROR_EXIT);
    })
    .help()
    .alias('help', 'h')
    .version(ownPackage().version)
    .alias('version', 'V');
  registerInitCommand(cli, ownPackage().version);
  registerDbCommands(cli);
  registerTriggererCommand(cli);
  registerRuntimeCommands(cli);
  registerStandaloneCommand(cli);
  registerDagsCommands(cli);
  registerTasksCommands(cli);
  registerJobsCommands(cli);
  registerTriggersCommands(cli);
  registerWebCommand(cli);
  registerConnectionsCommands(cli);
  registerSignalCommands(cli);
  await cli.parseAsync();
}
