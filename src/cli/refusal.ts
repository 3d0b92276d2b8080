import yargs, { type Argv } from 'yargs';
import { closestName } from '../vocabulary/suggest.ts';

/**
 * What yargs hands a failure handler as `usage`: the refused command's help, whose descriptions
 * are keyed by that command's flags (and positionals), and its subcommands.
 */
interface CommandUsage {
  getDescriptions(): Record<string, unknown>;
  getCommands(): ReadonlyArray<readonly [string, ...unknown[]]>;
}

/** How many commands taking a flag are named in full; more are counted. */
const MOST_COMMANDS_NAMED = 5;
/** The flag the probes give: no command has it, so yargs refuses it and hands over the command's usage. */
const PROBE_FLAG = '--deferflow-probe-flag';

/** A command a user runs (`dags list`, `worker`) and the flags it takes, without `--`. */
interface CommandFlags {
  readonly path: readonly string[];
  readonly flags: readonly string[];
}

/**
 * The lines printed under `error: <message>` when yargs refuses a command line, up to the hint
 * about --help:
 * - an unknown flag like one of the command given: `concurency: did you mean --concurrency?`;
 * - an unknown flag that is (or is like) a flag of other commands: `dags: not an option of
 *   deferflow dags list; --dags is one of deferflow dags reserialize, deferflow standalone, …`;
 * - a value like one of an argument's choices: `migrat: did you mean migrate?`.
 * The first line is the refusal itself, with a flag yargs lists twice (as given and
 * camel-cased: `pol-interval, polInterval`) listed once. Anything unforeseen (yargs worded its
 * refusal otherwise) leaves the refusal as it was: a suggestion can never break a refusal.
 */
export function refusalLines(message: string, usage: unknown, argv: readonly string[], register: (cli: Argv) => void): string[] {
  try {
    return explained(message, usage as CommandUsage, argv, register);
  } catch {
    return [`error: ${message}`];
  }
}

function explained(message: string, usage: CommandUsage, argv: readonly string[], register: (cli: Argv) => void): string[] {
  // An argument with choices: `deferflow db migrat`, `dags runs --state sucess`.
  const choice = /Given: "(.*)", Choices: (.+)$/m.exec(message);
  if (choice) {
    const meant = closestName(
      choice[1]!,
      choice[2]!.split(', ').map((quoted) => String(JSON.parse(quoted))),
    );
    return [`error: ${message}`, ...(meant ? [`${choice[1]}: did you mean ${meant}?`] : [])];
  }
  const listed = /^Unknown arguments?: (.+)$/.exec(message)?.[1];
  if (!listed) return [`error: ${message}`];
  const unknown = onceEach(listed.split(', '));
  const lines = [`error: Unknown argument${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')}`];
  const here = Object.keys(usage.getDescriptions());
  let commands: CommandFlags[] | null = null;
  for (const given of unknown) {
    const meant = closestName(given, here);
    if (meant) {
      lines.push(`${given}: did you mean --${meant}?`);
      continue;
    }
    // Not this command's: perhaps another's (`dags list --dags`, a flag of reserialize and the daemons).
    commands ??= everyCommand(register);
    const current = commands.find((command) => command.path.every((word, i) => argv[i] === word));
    const elsewhere = commands.filter((command) => command !== current);
    const flag = closestName(
      given,
      elsewhere.flatMap((command) => command.flags),
    );
    if (!flag || !current) continue;
    const takers = elsewhere.filter((command) => command.flags.includes(flag)).map((command) => `deferflow ${command.path.join(' ')}`);
    // A flag most commands take (--db) is named with a few of them: the line stays a line.
    const named = takers.length <= MOST_COMMANDS_NAMED ? takers.join(', ') : `${takers.length} others (${takers.slice(0, 3).join(', ')}, …)`;
    lines.push(`${given}: not an option of deferflow ${current.path.join(' ')}; --${flag} is one of ${named}`);
  }
  return lines;
}

/** The flags given, each once: yargs adds the camel-cased form of one with a dash (`pol-interval, polInterval`). */
function onceEach(given: readonly string[]): string[] {
  const camelCased = new Set(given.filter((flag) => flag.includes('-')).map((flag) => flag.replace(/-+([^-])/g, (_, letter: string) => letter.toUpperCase())));
  return given.filter((flag) => !camelCased.has(flag));
}

/**
 * Every command that runs something, with its flags, read from yargs itself: each command is
 * parsed again in a throwaway instance with a flag no command has, and the refusal's usage
 * names the command's flags and subcommands. Only ever run for a refusal, never on a start.
 */
function everyCommand(register: (cli: Argv) => void): CommandFlags[] {
  const found: CommandFlags[] = [];
  const visit = (path: readonly string[], positionals: ReadonlySet<string>): void => {
    const usage = probe(path, register);
    const subcommands = usage.getCommands().map(([command]) => command);
    if (path.length > 0 && subcommands.length === 0) {
      const flags = Object.keys(usage.getDescriptions()).filter((name) => name !== 'help' && name !== 'version' && !positionals.has(name));
      found.push({ path, flags });
    }
    for (const command of subcommands) {
      const [word, ...rest] = command.split(' ');
      visit([...path, word!], new Set(rest.map((positional) => positional.replace(/^[<[](.*?)(\.\.\.)?[>\]]$/, '$1'))));
    }
  };
  visit([], new Set());
  return found.sort((a, b) => a.path.join(' ').localeCompare(b.path.join(' ')));
}

function probe(path: readonly string[], register: (cli: Argv) => void): CommandUsage {
  let usage: CommandUsage | null = null;
  const cli = yargs([...path, PROBE_FLAG])
    .strict()
    .demandCommand(1)
    .exitProcess(false)
    .help(false)
    .version(false)
    .fail((_message, _error, failed) => {
      usage = failed as unknown as CommandUsage;
      throw new ProbeEnded();
    });
  register(cli);
  try {
    // Refused in validation, before any handler runs: nothing of the command is executed.
    void cli.parse();
  } catch (error) {
    if (!(error instanceof ProbeEnded)) throw error;
  }
  if (!usage) throw new ProbeEnded();
  return usage;
}

class ProbeEnded extends Error {}
