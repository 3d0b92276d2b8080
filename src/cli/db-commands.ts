import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import type { Database } from '../database/connect.ts';
import type { Stores } from '../storage/index.ts';
import { DEFAULT_DATABASE_URL, redactDatabaseUrl } from '../database/database-url.ts';
import { COMMON_OPTIONS, ENCRYPTION_KEYS_ENV, keyringOf } from '../daemons/common-options.ts';
import { Keyring } from '../database/encryption/keyring.ts';
import { durationText } from '../vocabulary/options/option-table.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';

export function databaseUrlFrom(flag: string | undefined): string {
  return flag ?? process.env[COMMON_OPTIONS.databaseUrl.env] ?? DEFAULT_DATABASE_URL;
}

/**
 * Runs `work` on the database --db (or its environment variable) names, which must exist and be
 * migrated (see openMigratedDatabase), and closes it however `work` ends. `keyring`: to read
 * what is encrypted at rest (only what is read needs it; nothing is written with it).
 */
export async function withMigratedDatabase<T>(dbFlag: unknown, work: (database: Database) => Promise<T>, keyring?: Keyring): Promise<T> {
  const { openMigratedDatabase } = await import('../database/open-migrated-database.ts');
  const database = await openMigratedDatabase(databaseUrlFrom(dbFlag as string | undefined), keyring);
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

/** withMigratedDatabase, handing `work` the storage layer's operations on that database too. */
export async function withStorage<T>(dbFlag: unknown, work: (storage: Stores, database: Database) => Promise<T>): Promise<T> {
  const { openStores } = await import('../storage/index.ts');
  return withMigratedDatabase(dbFlag, (database) => work(openStores(database), database));
}

export function registerDbCommands(cli: Argv): void {
  cli.command(
    'db <action>',
    'Database commands: migrate, schema, clean, generate-key, rotate-key',
    (db) =>
      db
        .positional('action', {
          choices: ['migrate', 'schema', 'clean', 'generate-key', 'rotate-key'] as const,
          describe:
            'migrate: apply new migrations; schema: print the schema; clean: delete what finished before --older-than; ' +
            'generate-key: print a new encryption key; rotate-key: re-encrypt every stored secret-bearing value with the first key',
        })
        .option('db', {
          type: 'string',
          describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}, default ${DEFAULT_DATABASE_URL}]`,
        })
        .option('older-than', numberFlag('duration', 'clean: what finished longer ago than this (30d, 12h, 90m, 2w, seconds, or P30D)'))
        .option('yes', { type: 'boolean', default: false, describe: 'clean: delete (without it, clean only counts what it would delete)' })
        .option('id', { type: 'string', describe: "generate-key: the new key's id (letters, digits, _ or -) [default k<today, YYYYMMDD>]" })
        .option('encryption-keys-file', {
          type: 'string',
          describe: `rotate-key: ${COMMON_OPTIONS.encryptionKeysFile.describe} [env ${COMMON_OPTIONS.encryptionKeysFile.env}]`,
        }),
    async (args) => {
      if (args.action === 'clean') {
        await clean(args.db, args['older-than'] as string | undefined, args.yes);
        return;
      }
      if (args['older-than'] !== undefined || args.yes)
        throw new InvalidOptionError('older-than', `--older-than and --yes are for db clean, not db ${args.action}`);
      if (args.id !== undefined && args.action !== 'generate-key') throw new InvalidOptionError('id', `is for db generate-key, not db ${args.action}`);
      if (args['encryption-keys-file'] !== undefined && args.action !== 'rotate-key')
        throw new InvalidOptionError('encryption-keys-file', `is for db rotate-key, not db ${args.action}`);
      if (args.action === 'generate-key') {
        process.stdout.write(`${Keyring.generateEntry(args.id ?? `k${new Date().toISOString().slice(0, 10).replaceAll('-', '')}`)}\n`);
        return;
      }
      if (args.action === 'rotate-key') {
        await rotateKey(args.db, args['encryption-keys-file']);
        return;
      }
      const url = databaseUrlFrom(args.db);
      const [{ openDatabase }, { openMigratedDatabase }, { migrateToLatest }, { dumpSchema }] = await Promise.all([
        import('../database/connect.ts'),
        import('../database/open-migrated-database.ts'),
        import('../database/migrate.ts'),
        import('../database/schema-dump.ts'),
      ]);
      // migrate creates what is missing; schema shows a migrated database only.
      const database = args.action === 'migrate' ? openDatabase(url) : await openMigratedDatabase(url);
      try {
        if (args.action === 'migrate') {
          const applied = await migrateToLatest(database);
          process.stdout.write(
            applied.length > 0
              ? `applied ${applied.length} migration(s) to ${redactDatabaseUrl(url)}: ${applied.join(', ')}\n`
              : `${redactDatabaseUrl(url)} is up to date\n`,
          );
        } else {
          process.stdout.write(await dumpSchema(database));
        }
      } finally {
        await database.close();
      }
    },
  );
}

/**
 * `deferflow db clean --older-than 30d [--yes]`: Airflow's db clean. Without --yes it counts and
 * deletes nothing; a missing or mistyped --older-than is refused before the database is opened.
 */
async function clean(dbFlag: string | undefined, olderThan: string | undefined, yes: boolean): Promise<void> {
  if (olderThan === undefined)
    throw new InvalidOptionError('older-than', 'is needed: db clean deletes only what finished longer ago than it (e.g. --older-than 30d)');
  const ms = durationText(olderThan, 'older-than');
  const before = Date.now() - ms;
  await withStorage(dbFlag, async (storage) => {
    const counts = await storage.maintenance.cleanDatabase(before, !yes);
    const what = `${counts.dagRuns} finished DAG run(s) with ${counts.taskInstances} task instance(s), ${counts.taskLogLines} task log line(s), ${counts.triggerLogLines} trigger log line(s), ${counts.signals} signal(s), ${counts.jobs} ended job row(s), ${counts.auditEntries} audit log record(s), ${counts.samples} daemon sample(s)`;
    process.stdout.write(
      yes
        ? `deleted ${what} from before ${new Date(before).toISOString()}\n`
        : `would delete ${what} from before ${new Date(before).toISOString()}; nothing deleted (pass --yes to delete)\n`,
    );
  });
}

/**
 * `deferflow db rotate-key`: every trigger kwargs, next_kwargs and event value not yet sealed
 * with the first key (plain ones, and those of older keys) is re-encrypted with it. Exits 1,
 * naming each, when some could not be read (their key is not given): run it again with that key
 * listed too.
 */
async function rotateKey(dbFlag: string | undefined, keysFileFlag: string | undefined): Promise<void> {
  const keyring = keyringOf(keysFileFlag ?? process.env[COMMON_OPTIONS.encryptionKeysFile.env], process.env);
  if (!keyring.encrypting) {
    throw new InvalidOptionError(
      'encryption-keys-file',
      `db rotate-key needs the keys: set ${ENCRYPTION_KEYS_ENV} or --encryption-keys-file, the new key first and the old ones after it`,
    );
  }
  const [{ openMigratedDatabase }, { openStores }] = await Promise.all([import('../database/open-migrated-database.ts'), import('../storage/index.ts')]);
  const database = await openMigratedDatabase(databaseUrlFrom(dbFlag), keyring);
  try {
    const storage = openStores(database);
    await storage.maintenance.verifyEncryptionKeys(Date.now());
    const counts = await storage.maintenance.resealValues();
    const { resealed } = counts;
    const total = Object.values(resealed).reduce((sum, count) => sum + count, 0);
    for (const message of counts.unreadable) process.stderr.write(`error [DF_ENCRYPTION_KEY]: ${message}\n`);
    if (counts.stoppedBeforeWriting) {
      process.stderr.write(
        `${counts.unreadable.length} value(s) could not be decrypted, so nothing was re-encrypted; list their key too (or remove those rows) and run db rotate-key again\n`,
      );
      process.exitCode = 1;
      return;
    }
    process.stdout.write(
      `re-encrypted ${total} value(s) with key ${keyring.primaryKeyId} (trigger kwargs ${resealed['trigger.kwargs']}, next_kwargs ${resealed['task_instance.next_kwargs']}, events ${resealed['task_instance.next_event']}, task state ${resealed['task_state.value']}, composite members ${resealed['trigger_member.outcome']}); ${counts.current} already were\n`,
    );
    if (counts.unreadable.length > 0) {
      process.stderr.write(
        `${counts.unreadable.length} value(s) written during the rotation could not be decrypted and were left as they are; list their key too and run db rotate-key again\n`,
      );
      process.exitCode = 1;
    }
  } finally {
    await database.close();
  }
}
