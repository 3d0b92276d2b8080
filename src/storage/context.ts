import type { Kysely, Transaction } from 'kysely';
import type { DeferflowErrorCode } from '../errors.ts';
import type { DialectAdapter } from '../db/dialect.ts';
import type { DatabaseSchema } from '../db/schema.ts';

/** What every storage operation receives: a connection (or open transaction) and the adapter. */
export interface StorageContext {
  readonly db: Kysely<DatabaseSchema> | Transaction<DatabaseSchema>;
  readonly adapter: DialectAdapter;
}

/** next_method of a task instance whose trigger failed or timed out (Airflow's "__fail__"). */
export const TRIGGER_FAILURE_METHOD = '__fail__';

export type FailureReason = 'trigger_failure' | 'timeout';

/** next_kwargs that the failure marker carries. */
export interface FailureKwargs {
  /** The stable code of what went wrong (DF_TRIGGER_FAILED, DF_UNKNOWN_TRIGGER, …): what scripts match on. */
  readonly code: DeferflowErrorCode;
  readonly error: string;
  readonly traceback: string | null;
  readonly reason: FailureReason;
}
