// What the benchmark scripts share: a scratch database, percentiles, and waiting for a condition.
import path from 'node:path';
import { createScratchSchema } from '../test/support/pg-schemas.ts';

/** The database a benchmark runs on: a SQLite file in `scratch` by default, a private PostgreSQL schema (dropped afterwards) for a postgres:// URL. */
export async function benchDatabase(given: string | undefined, scratch: string): Promise<{ url: string; dispose: () => Promise<void> }> {
  if (!given) return { url: `sqlite:${path.join(scratch, 'bench.db')}`, dispose: async () => {} };
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
