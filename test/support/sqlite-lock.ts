import BetterSqlite3 from 'better-sqlite3';
import type { TestDatabase } from './fixtures.ts';

/**
 * Runs `locked` while another connection holds the SQLite file with an exclusive transaction
 * (its own statements go through), committing when it returns and letting go either way: as
 * another program writing to the file for that long would.
 */
export async function whileLocked(db: TestDatabase, locked: (locker: BetterSqlite3.Database) => Promise<void>): Promise<void> {
  const locker = new BetterSqlite3(db.url.replace(/^sqlite:/, ''));
  try {
    locker.exec('BEGIN EXCLUSIVE');
    await locked(locker);
    locker.exec('COMMIT');
  } finally {
    if (locker.inTransaction) locker.exec('ROLLBACK');
    locker.close();
  }
}
