// What the benchmark scripts share: a scratch database, deferrals inserted in bulk, percentiles, and waiting for a condition.
import path from 'node:path';
import type { Database } from '../src/database/connect.ts';
import { toDbTime } from '../src/database/schema.ts';
import { wake } from '../src/storage/wake.ts';
import { createScratchSchema } from '../test/support/pg-schemas.ts';

/**
 * The database a benchmark runs on: a SQLite file `<name>.db` in `scratch` by default, a private
 * PostgreSQL schema (dropped afterwards) for a postgres:// URL, the file itself for a sqlite: URL.
 */
export async function benchDatabase(given: string | undefined, scratch: string, name = 'bench'): Promise<{ url: string; dispose: () => Promise<void> }> {
  if (!given) return { url: `sqlite:${path.join(scratch, `${name}.db`)}`, dispose: async () => {} };
  if (given.startsWith('sqlite:')) return { url: given, dispose: async () => {} };
  const schema = await createScratchSchema(given, 'bench');
  return { url: schema.url, dispose: () => schema.drop() };
}

/** The p-th percentile (0..1) of ascending `sorted`. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}

/** Waits until `check` holds, looking every `intervalMs`; after `timeoutMs`, throws naming `what`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  { timeoutMs = 30_000, what = 'a step of the benchmark', intervalMs = 2 }: { timeoutMs?: number; what?: string; intervalMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A trigger row's classpath and kwargs as stored (kwargs sealed where the benchmark encrypts). */
export interface StoredTrigger {
  classpath: string;
  kwargs: string;
}

/**
 * Inserts `count` task instances (dag `bench`, task `wait_<i>`), each deferred on a trigger row of
 * its own (`trigger(i)`), 1,000 a transaction (a multi-row insert each), and wakes the triggerers
 * as deferTaskInstance does: on PostgreSQL they are notified, not left to their safety-net poll.
 * One deferTaskInstance a row would take minutes for 100,000 and time the benchmark, not the daemon.
 */
export async function insertDeferrals(
  { db, adapter }: Database,
  count: number,
  trigger: (index: number) => StoredTrigger,
  nextKwargs = '{}',
  /** The index of the first (a second call adds wait_<firstIndex>…). */
  firstIndex = 0,
): Promise<void> {
  const now = toDbTime(Date.now());
  const chunk = 1000;
  for (let start = 0; start < count; start += chunk) {
    const size = Math.min(chunk, count - start);
    await db.transaction().execute(async (trx) => {
      const triggers = await trx
        .insertInto('trigger')
        .values(Array.from({ length: size }, (_, i) => ({ ...trigger(firstIndex + start + i), created_at: now, triggerer_id: null, hash: null })))
        .returning('id')
        .execute();
      await trx
        .insertInto('task_instance')
        .values(
          triggers.map((row, i) => ({
            dag_id: 'bench',
            task_id: `wait_${firstIndex + start + i}`,
            run_id: 'bench__1',
            state: 'deferred' as const,
            next_method: 'resume',
            next_kwargs: nextKwargs,
            trigger_id: row.id,
          })),
        )
        .execute();
      await wake(trx, adapter, 'triggerer');
    });
  }
}
