import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// High availability in seconds (issue 42). Immutable once released.
//
// job.liveness_lock: what the daemon holds for its process's life so that peers can tell at once
// that it is gone (see src/database/liveness-locks.ts): 'pg-advisory' (a session advisory lock
// keyed by the job id, freed by PostgreSQL when the session ends), or 'file:<path>' (an
// operating-system lock on that file, freed by the kernel when the process ends). Null: it holds
// none (written before this migration, or behind a pooler that breaks session locks), and only
// its heartbeat tells.

export async function up(db: Kysely<any>, _adapter: DialectAdapter): Promise<void> {
  await sql`alter table job add column liveness_lock text`.execute(db);
}
