// What the benchmark scripts share: a scratch database and percentiles.
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
