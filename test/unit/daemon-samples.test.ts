// A daemon's samples for the charts, on both dialects, judged by the rows written: gauges as they
// are, running totals as what they grew by since the last sample, the interval covered, and
// every daemon's rows past a day deleted by a writer.
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { DaemonSampler, SAMPLE_RETENTION_MS } from '../../src/services/observability/daemon-samples.ts';
import { openStores } from '../../src/storage/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { migratedDatabase, type TestDatabase } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('daemon samples on %s', (dialect) => {
  const open: TestDatabase[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });

  it('records gauges as they are and totals as their growth since the last sample; a writer deletes samples past a day', async () => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    const storage = openStores(db);
    let now = 10_000_000_000;
    const clock = { now: () => now };
    await storage.jobs.recordDaemonSample({ jobId: 99, jobType: 'WorkerJob', figures: { slots_used: 1 } }, now - SAMPLE_RETENTION_MS - 1);
    await storage.jobs.recordDaemonSample({ jobId: 99, jobType: 'WorkerJob', figures: { slots_used: 2 } }, now - SAMPLE_RETENTION_MS + 120_000);
    const figures = { running: 5, events_total: 7 };
    const sampler = new DaemonSampler(storage, { id: 1, jobType: 'TriggererJob' }, 60_000, () => figures, pino({ level: 'silent' }), clock);
    now += 60_000;
    await sampler.sampleNow();
    figures.running = 4;
    figures.events_total = 19;
    now += 30_000;
    await sampler.sampleNow();
    const rows = await storage.jobs.listDaemonSamples(0, 100);
    // The one past a day went with the first sample; the one within a day stays.
    expect(rows.map((row) => [row.jobId, row.figures])).toEqual([
      [1, { interval_ms: 60_000, running: 5, events: 7 }],
      [1, { interval_ms: 30_000, running: 4, events: 12 }],
      [99, { slots_used: 2 }],
    ]);
    expect(rows[0]!.at).toBe(10_000_060_000);
    expect(rows.filter((row) => row.jobId === 1).map((row) => row.jobType)).toEqual(['TriggererJob', 'TriggererJob']);
    expect(await storage.jobs.listDaemonSamples(10_000_070_000, 100)).toHaveLength(1);
  });

  it('a reading that fails is logged and written nothing; the next one goes on', async () => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    const storage = openStores(db);
    const warnings: string[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => warnings.push(JSON.parse(line).msg as string) });
    let fail = true;
    const sampler = new DaemonSampler(
      storage,
      { id: 3, jobType: 'SchedulerJob' },
      60_000,
      () => {
        if (fail) throw new Error('database away');
        return { deferred: 2 };
      },
      log,
      { now: () => Date.now() },
    );
    await sampler.sampleNow();
    expect(warnings).toEqual(["recording this daemon's figures for the charts failed: Error: database away"]);
    fail = false;
    await sampler.sampleNow();
    expect((await storage.jobs.listDaemonSamples(0, 10)).map((row) => row.figures.deferred)).toEqual([2]);
  });
});
