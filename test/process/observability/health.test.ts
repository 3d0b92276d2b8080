// /health as an orchestrator's probe sees it: 200 while the process's event loop turns and its
// heartbeat is written, 503 naming the failing check when the loop is blocked or the database
// cannot be reached, and 200 again once that passes. The answers come from a thread of their
// own, so a blocked loop is reported, not just silent.
import net from 'node:net';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../../src/index.ts';
import { openStores } from '../../../src/storage/index.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { createTaskInstance, waitFor, type TestDatabase } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { postgresProxy } from '../../support/postgres-proxy.ts';
import { spawnDeferflow, spawnTriggerer, stopCleanly } from '../../support/processes.ts';
import { health } from '../../support/scrape.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const FAST_HEARTBEATS = ['--heartbeat-interval', '0.5', '--health-check-threshold', '2', '--poll-interval', '0.2'];

async function deferOnto(db: TestDatabase, trigger: import('../../../src/index.ts').BaseTrigger) {
  const id = await createTaskInstance(db);
  await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
  return id;
}

describe('/health of a triggerer', () => {
  it('turns 503 naming the event loop while a trigger blocks it, answers /metrics 503 meanwhile, and 200 again after', async () => {
    const db = await scratch.database('sqlite');
    const triggerer = spawnTriggerer([
      ...['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--http-port', '0', '--health-loop-threshold', '1'],
      ...['--heartbeat-interval', '0.5', '--health-check-threshold', '30', '--poll-interval', '0.2'],
    ]);
    const base = await triggerer.waitForHttp();
    await triggerer.waitForJob();
    // 503 ("starting") until the first heartbeat is copied for the thread, within a quarter second.
    await waitFor(async () => (await health(base)).status === 200, { what: '/health ok' });

    await deferOnto(db, new t.BlockingTrigger({ sleepMs: 200, blockMs: 6000 }));
    const blocked = await waitFor(async () => ((await health(base)).status === 503 ? health(base) : null), { what: '/health failing', timeoutMs: 15_000 });
    expect(blocked.body.status).toBe('failing');
    expect(blocked.body.failing).toEqual(['event_loop']);
    expect(blocked.body.checks.event_loop).toMatchObject({ ok: false, threshold_ms: 1000 });
    expect(Number(blocked.body.checks.event_loop!.last_turn_ms_ago)).toBeGreaterThan(1000);
    // What needs the loop is refused by the thread rather than left hanging.
    const metrics = await fetch(`${base}/metrics`);
    expect(metrics.status).toBe(503);
    expect(await metrics.text()).toContain('event loop is blocked');

    await waitFor(async () => (await health(base)).status === 200, { what: '/health ok again', timeoutMs: 15_000 });
    await stopCleanly([triggerer]);
  });

  it('on sqlite: turns 503 naming the triggerer while another process holds the database locked, and 200 once it lets go', async () => {
    const db = await scratch.database('sqlite');
    const triggerer = spawnTriggerer(['--db', db.url, '--http-port', '0', ...FAST_HEARTBEATS]);
    const base = await triggerer.waitForHttp();
    await triggerer.waitForJob();
    await waitFor(async () => (await health(base)).status === 200, { what: '/health ok' });

    const locker = new BetterSqlite3(db.url.replace(/^sqlite:/, ''));
    try {
      locker.exec('BEGIN EXCLUSIVE');
      const failing = await waitFor(
        async () => {
          const answer = await health(base);
          return answer.status === 503 && answer.body.failing.includes('triggerer') ? answer : null;
        },
        { what: '/health failing on the heartbeat', timeoutMs: 20_000 },
      );
      expect(failing.body.checks.triggerer).toMatchObject({ ok: false, threshold_ms: 2000 });
      expect(String(failing.body.checks.triggerer!.reason)).toContain('heartbeat has not been written');
      locker.exec('COMMIT');
    } finally {
      if (locker.inTransaction) locker.exec('ROLLBACK');
      locker.close();
    }
    await waitFor(async () => (await health(base)).status === 200, { what: '/health ok again', timeoutMs: 20_000 });
    await stopCleanly([triggerer]);
  });

  it('on postgres: turns 503 naming the triggerer while the database cannot be reached, and 200 once it is back', async () => {
    const db = await scratch.database('postgres');
    const proxy = await postgresProxy(db.url);
    try {
      const triggerer = spawnTriggerer(['--db', proxy.url, '--http-port', '0', ...FAST_HEARTBEATS]);
      const base = await triggerer.waitForHttp();
      await triggerer.waitForJob();
      await waitFor(async () => (await health(base)).status === 200, { what: '/health ok' });

      await proxy.cut();
      const failing = await waitFor(
        async () => {
          const answer = await health(base);
          return answer.status === 503 && answer.body.failing.includes('triggerer') ? answer : null;
        },
        { what: '/health failing on the heartbeat', timeoutMs: 20_000 },
      );
      expect(String(failing.body.checks.triggerer!.reason)).toContain('heartbeat has not been written');
      expect(failing.body.checks.event_loop).toMatchObject({ ok: true });

      await proxy.restore();
      await waitFor(async () => (await health(base)).status === 200, { what: '/health ok again', timeoutMs: 30_000 });
      // The process lived through it.
      expect(triggerer.exited).toBeNull();
      await stopCleanly([triggerer]);
    } finally {
      proxy.close();
    }
  });
});

describe.each(testDialects)('/health and /metrics of the other commands on %s', (dialect) => {
  it('worker and scheduler serve them with --http-port; standalone by default, warning instead of failing when its port is taken', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('health-dags');
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--http-port', '0', '--heartbeat-interval', '0.5']);
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, '--http-port', '0', '--heartbeat-interval', '0.5']);
    for (const [proc, check] of [
      [worker, 'worker'],
      [scheduler, 'scheduler'],
    ] as const) {
      const base = await proc.waitForHttp();
      const answer = await waitFor(
        async () => {
          const probe = await health(base);
          return probe.status === 200 ? probe : null;
        },
        { what: `${check} healthy` },
      );
      expect(answer.body.checks[check]).toMatchObject({ ok: true, threshold_ms: 3000 });
      expect(Object.keys(answer.body.checks).sort()).toEqual(['event_loop', check].sort());
    }

    // Standalone serves on its default port; when that is taken (here by this test), it says so and runs on.
    const blocker = net.createServer();
    const blocked = await new Promise<boolean>((resolve) => {
      blocker.once('error', () => resolve(false));
      blocker.listen(8794, '127.0.0.1', () => resolve(true));
    });
    try {
      const standalone = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--log-level', 'info'], { DEFERFLOW_HTTP_PORT: undefined });
      await waitFor(() => standalone.stderr.some((line) => line.includes('127.0.0.1:8794 is in use')), {
        what: `the port warning (the test ${blocked ? 'took' : 'found taken'} 8794)`,
        timeoutMs: 20_000,
      });
      await waitFor(() => standalone.stderr.some((line) => line.includes('worker') && line.includes('started')), {
        what: 'standalone running',
        timeoutMs: 20_000,
      });
      await stopCleanly([standalone]);
    } finally {
      blocker.close();
    }
    // A port asked for and taken is refused at start, naming the option.
    const taken = spawnDeferflow(['scheduler', '--db', db.url, '--http-port', new URL(await scheduler.waitForHttp()).port]);
    expect((await taken.exit).code).not.toBe(0);
    expect(taken.stderr.join('\n')).toMatch(/http-port.*cannot listen/);
  });
});
