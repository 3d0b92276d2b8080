import type { Kysely, Transaction } from 'kysely';
import type { DialectAdapter } from '../database/dialect.ts';
import type { DatabaseSchema } from '../database/schema.ts';
import type { Keyring } from '../database/encryption/keyring.ts';

/** What every storage operation receives: a connection (or open transaction) and the adapter. */
export interface StorageContext {
  readonly db: Kysely<DatabaseSchema> | Transaction<DatabaseSchema>;
  readonly adapter: DialectAdapter;
  /** Seals secret-bearing values as they are written, opens them as they are read. */
  readonly keyring: Keyring;
}

export { TRIGGER_FAILURE_METHOD, type FailureKwargs, type FailureReason } from '../model/failure-marker.ts';
