import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Poison triggers (issue 13). Immutable once released.
//
// trigger.culprit_count: how many times this trigger's step held a triggerer's event loop past
// the watchdog's limit (the watchdog thread records it, then restarts the process).
// trigger.quarantined_at: set when the count reached the triggerer's quarantine limit: such a
// trigger is never claimed again; a triggerer fails its task instances (DF_TRIGGER_QUARANTINED).

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  const { time } = adapter.types;
  await sql`alter table trigger add column culprit_count integer not null default 0`.execute(db);
  await sql`alter table trigger add column quarantined_at ${sql.raw(time)}`.execute(db);
  await sql`create index trigger_quarantined_idx on trigger (id) where quarantined_at is not null`.execute(db);
}
