import type { StorageContext } from './context.ts';
import { cleanDatabase, type CleanCounts } from './clean-database.ts';
import { resealValues, type ResealCounts } from './reseal-values.ts';
import { verifyEncryptionKeys } from './encryption-keys.ts';
import { countWaitingWork, type WaitingWorkCounts } from './count-waiting-work.ts';

/** The database as a whole: cleanDatabase, verifyEncryptionKeys, resealValues, countWaitingWork. */
export class MaintenanceStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  cleanDatabase(before: number, dryRun: boolean): Promise<CleanCounts> {
    return cleanDatabase(this.#context, before, dryRun);
  }

  /**
   * Refuses (DF_ENCRYPTION_KEY_MISMATCH) a key whose id the database knows under other material,
   * and records the keys it does not know yet; every daemon and `db rotate-key` before writing.
   */
  verifyEncryptionKeys(now: number): Promise<void> {
    return verifyEncryptionKeys(this.#context, now);
  }

  /** Re-encrypts every secret-bearing value with the first key (`db rotate-key`). */
  resealValues(): Promise<ResealCounts> {
    return resealValues(this.#context);
  }

  /** Deferred task instances and unfinished DAG runs by state (for the metrics gauges). */
  countWaitingWork(): Promise<WaitingWorkCounts> {
    return countWaitingWork(this.#context);
  }
}
