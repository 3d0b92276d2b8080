import yargs, { type Argv } from 'yargs';
import { DEFERFLOW_ERROR_EXIT, formatCliError } from './cli-errors.ts';
import { registerConnectionsCommands } from './connections-commands.ts';
import { registerSignalCommands } from './signal-commands.ts';
import { registerDbCommands } from './db-commands.ts';
import { registerInitCommand } from './init-command.ts';
import { ownPackage } from './own-package.ts';
import { closestName } from '../config/suggest.ts';
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
    .demandCommand(1, 'name a command')
    .recommendCommands()
    .wrap(Math.min(110, process.stdout.columns ?? 110))
    .fail((message, error, usage) => {
      if (error) {
        process.stderr.write(`${formatCliError(error)}\n`);
      } else {
        process.stderr.write(`error: ${message}\n${suggestionsOrNone(message, usage)}run with --help for usage\n`);
      }
      process.exit(DEFERFLOW_ERROR_EXIT);
    })
    .help()
    .alias('help', 'h')
    .version(ownPackage().version)
    .alias('version', 'V');
  // Each command's module imports what its handler needs only when the handler runs (await
  // import()): the database layer alone is ~300 modules (kysely's ESM build 262 of them), ~0.3 s
  // of every start, and --help, --version, init or a refused flag need none of it.
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

/**
 * `did you mean --concurrency?` for each unknown flag in a refusal that resembles a flag of the
 * command given, or `did you mean migrate?` for a value that resembles one of the choices of an
 * argument that has them. yargs hands its failure handler the command's usage, whose descriptions
 * are keyed by that command's flags; without them (another yargs) there is simply no suggestion.
 */
function suggestionsOrNone(message: string, usage: unknown): string {
  try {
    return suggestions(message, usage);
  } catch {
    // yargs worded its refusal otherwise: the refusal itself is what matters.
    return '';
  }
}

function suggestions(message: string, usage: unknown): string {
  // An argument with choices: `deferflow db migrat`, `dags runs --state sucess`.
  const choice = /Given: "(.*)", Choices: (.+)$/m.exec(message);
  if (choice) {
    const meant = closestName(
      choice[1]!,
      choice[2]!.split(', ').map((quoted) => String(JSON.parse(quoted))),
    );
    return meant ? `${choice[1]}: did you mean ${meant}?\n` : '';
  }
  const unknown = /^Unknown arguments?: (.+)$/.exec(message)?.[1];
  const describedFlags = (usage as { getDescriptions?: () => Record<string, unknown> } | undefined)?.getDescriptions?.();
  if (!unknown || !describedFlags) return '';
  const flags = Object.keys(describedFlags);
  // yargs lists a mistyped `--pol-interval` twice, as given and camel-cased: one line each flag meant.
  const meantBy = new Map<string, string>();
  for (const given of unknown.split(', ')) {
    const meant = closestName(given, flags);
    if (meant && !meantBy.has(meant)) meantBy.set(meant, given);
  }
  return [...meantBy].map(([meant, given]) => `${given}: did you mean --${meant}?\n`).join('');
}
