import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import { COMMON_OPTIONS, keyringOf } from '../daemons/common-options.ts';
import { positiveInteger } from '../vocabulary/options/option-table.ts';
import { NotJsonError } from '../vocabulary/errors.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import { withMigratedDatabase } from './db-commands.ts';
import { printListing } from './table.ts';

/** `deferflow signal send | list`: the notification service from a shell. */
export function registerSignalCommands(cli: Argv): void {
  cli.command('signal', 'Signals (AIP-35): send, list', (signal) =>
    signal
      .option('db', { type: 'string', describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}]` })
      .command(
        'send <key> [value]',
        'Send a signal on KEY with a JSON VALUE (default null); prints the version it got',
        (command) =>
          command
            .positional('key', { type: 'string', demandOption: true })
            .positional('value', { type: 'string', describe: 'JSON, e.g. \'{"rows": 120}\' or \'"done"\'' })
            .option('text', { type: 'boolean', describe: 'Send VALUE as text (a JSON string) instead of parsing it as JSON' }),
        async (args) => {
          const value = signalValue(args.value, args.text === true);
          const [{ OperatorActions, cliActor }, { nobodyWarning, reachesNobody, signalAudience }] = await Promise.all([
            import('../services/operator-actions.ts'),
            import('../services/signals/signal-audience.ts'),
          ]);
          await withMigratedDatabase(
            args.db,
            async (database) => {
              // Read before the send (see signalAudience). Stored either way (a send may come
              // before its waits); a key nothing uses is said, with the one it may have meant.
              const audience = await signalAudience(database, args.key!, value);
              const version = await new OperatorActions(database, cliActor()).sendSignal(args.key!, value);
              process.stdout.write(`${version}\n`);
              if (reachesNobody(audience)) process.stderr.write(`warning: ${nobodyWarning(args.key!, version, audience)}\n`);
            },
            keyringOf(process.env[COMMON_OPTIONS.encryptionKeysFile.env], process.env),
          );
        },
      )
      .command(
        'list <key>',
        "List a key's signals, oldest first",
        (command) =>
          command
            .positional('key', { type: 'string', demandOption: true })
            // Strings, checked by the parsers: yargs would turn `--since ten` into NaN.
            .option('since', numberFlag('integer', 'Only versions after this one'))
            .option('limit', numberFlag('integer', 'Most signals listed', 1000))
            .option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          const since = args.since === undefined ? 0 : args.since === '0' ? 0 : positiveInteger(args.since, 'since');
          const limit = positiveInteger(args.limit, 'limit');
          const { listSignals } = await import('../services/signals/signal-service.ts');
          await withMigratedDatabase(args.db, async (database) => {
            const rows = (await listSignals(database, args.key!, { sinceVersion: since, limit })).map((s) => ({
              key: s.key,
              version: s.version,
              sent_at: new Date(s.sentAt).toISOString(),
              value: s.value,
            }));
            printListing(rows, {
              json: args.json,
              empty: `no signals on ${args.key}${since > 0 ? ` after version ${since}` : ''}`,
              headers: ['VERSION', 'SENT AT', 'VALUE'],
              cells: (row) => [String(row.version), row.sent_at, JSON.stringify(row.value)],
            });
          });
        },
      )
      .demandCommand(1, 'name a signal command'),
  );
}

function signalValue(text: string | undefined, asText: boolean): JsonValue {
  if (text === undefined) return null;
  if (asText) return text;
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    throw new NotJsonError(
      'value',
      `${JSON.stringify(text)} is not JSON; quote text as a JSON string ('"${text.replace(/'/g, '')}"') or pass --text to send it as text`,
      false,
    );
  }
}
