import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Signals (AIP-35's notification service): a key, a JSON value, and a version per key counted up
// by every send. signal_key holds each key's latest version, so versions keep rising after old
// signals are pruned; signal holds the values sent. Immutable once released.

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  const { json, time, bigint } = adapter.types;
  await sql`
    create table signal_key (
      key text primary key,
      -- The latest version sent (the first send is 1).
      version ${sql.raw(bigint)} not null check (version >= 1),
      updated_at ${sql.raw(time)} not null
    )`.execute(db);
  await sql`
    create table signal (
      key text not null,
      version ${sql.raw(bigint)} not null check (version >= 1),
      value ${sql.raw(json)} not null,
      sent_at ${sql.raw(time)} not null,
      constraint signal_pkey primary key (key, version)
    )`.execute(db);
  // Retention prunes by age.
  await sql`create index signal_sent_at_idx on signal (sent_at)`.execute(db);
}
