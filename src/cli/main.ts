import yargs, { type Argv } from 'yargs';
import { DEFERFLOW_ERROR_EXIT, formatCliError } from './cli-errors.ts';
import { registerConnectionsCommands } from './connections-commands.ts';
import { registerSignalCommands } from './signal-commands.ts';
import { registerDbCommands } from './db-commands.ts';
import { registerInitCommand } from './init-command.ts';
import { ownPackage } from './own-package.ts';
import { refusalLines } from './refusal.ts';
import { mistypedVariableWarnings } from './environment-check.ts';
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
  for (const warning of mistypedVariableWarnings(process.env)) process.stderr.write(`${warning}\n`);
  const cli: Argv = yargs([...argv])
    .scriptName('deferflow')
    .usage('$0 <command> [options]')
    .strict()
    // Every value is kept as the text given: each option's own parser checks it (see declareOptions).
    .parserConfiguration({ 'parse-numbers': false })
    .demandCommand(1, 'name a command')
    .recommendCommands()
    .wrap(Math.min(110, process.stdout.columns ?? 110))
    .fail((message, error, usage) => {
      if (error) {
        process.stderr.write(`${formatCliError(error)}\n`);
      } else {
        process.stderr.write(`${[...refusalLines(message, usage, argv, registerCommands), 'run with --help for usage'].join('\n')}\n`);
      }
      process.exit(DEFERFLOW_ERROR_EXIT);
    })
    .help()
    .alias('help', 'h')
    .version(ownPackage().version)
    .alias('version', 'V');
  registerCommands(cli);
  skipHelpRendering(cli);
  await cli.parseAsync();
}

/**
 * yargs renders the running command's help text as its handler starts, in case the program asks
 * for it later (getHelp, showHelp): ~80 ms of CPU in every command and every daemon's start,
 * spent laying out text nobody reads (--help prints during the parse, and refusals print their own
 * lines). deferflow never asks later, so the rendering is skipped. A yargs without this internal
 * method is left as it is.
 */
function skipHelpRendering(cli: Argv): void {
  const internal = cli as unknown as { getInternalMethods?: () => { getUsageInstance?: () => { cacheHelpMessage?: () => void } } };
  const usage = internal.getInternalMethods?.().getUsageInstance?.();
  if (typeof usage?.cacheHelpMessage === 'function') usage.cacheHelpMessage = () => {};
}

/**
 * Every command of the CLI. Each command's module imports what its handler needs only when the
 * handler runs (await import()): the database layer with kysely (see database/kysely.ts) costs
 * ~0.2 s of CPU at every start, and --help, --version, init or a refused flag need none of it.
 */
function registerCommands(cli: Argv): void {
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
}
