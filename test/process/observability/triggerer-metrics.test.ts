// /metrics and /health of a real triggerer process, scraped as Prometheus and a probe would:
// scrape, make the triggerer do something, scrape again.
import { afterAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../../src/index.ts';
import { openStores } from '../../../src/storage/index.ts';
import * as t from '../../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { createTaskInstance, taskInstance, waitFor, type TestDatabase } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { spawnTriggerer, stopCleanly } from '../../support/processes.ts';
import { health, scrape } from '../../support/scrape.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

async function deferOnto(db: TestDatabase, trigger: import('../../../src/index.ts').BaseTrigger, timeout?: number) {
  const id = await createTaskInstance(db);
  const { triggerId } = await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume', timeout }));
  return { id, triggerId };
}

describe.each(testDialects)('triggerer metrics on %s', (dialect) => {
  it('count claims, events and their commit latency, failures, timeouts and blocked steps by classpath; gauges follow the triggers held', async () => {
    const db = await scratch.database(dialect);
    const triggerer = spawnTriggerer([
      ...['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--http-port', '0'],
      ...['--capacity', '10', '--poll-interval', '0.2', '--heartbeat-interval', '0.5', '--health-check-threshold', '3', '--block-threshold', '200'],
    ]);
    const base = await triggerer.waitForHttp();
    await triggerer.waitForJob();

    const before = await scrape(base);
    expect(before.value('deferflow_triggers_running')).toBe(0);
    expect(before.value('deferflow_triggerer_capacity_left')).toBe(10);
    expect(before.value('deferflow_trigger_events_written_total')).toBe(0);
    expect(before.value('deferflow_triggers_timed_out_total')).toBe(0);
    expect(before.value('deferflow_triggerer_claim_batch_size_count')).toBe(0);
    expect(before.value('deferflow_task_instances_deferred')).toBe(0);
    expect(before.sum('deferflow_triggers_failed_total')).toBe(0);
    expect(before.value('deferflow_job_heartbeat_age_seconds', { job_type: 'TriggererJob' })).toBeLessThan(3);
    // Node's default process metrics come along.
    expect(before.value('process_cpu_user_seconds_total')).toBeGreaterThan(0);

    // Two task instances share one trigger (dedup): one event, two moves.
    const shared = [await deferOnto(db, new t.DelayTrigger({ ms: 300 })), await deferOnto(db, new t.DelayTrigger({ ms: 300 }))];
    const throwing = await deferOnto(db, new t.ThrowingTrigger({ tag: 'metrics' }));
    const timingOut = await deferOnto(db, new t.NeverTrigger({ tag: 'times out' }), 1);
    const blocking = await deferOnto(db, new t.BlockingTrigger({ sleepMs: 50, blockMs: 400 }));
    const waiting = await deferOnto(db, new t.NeverTrigger({ tag: 'keeps waiting' }));

    await waitFor(
      async () => {
        const states = await Promise.all([...shared, throwing, timingOut, blocking].map(({ id }) => taskInstance(db, id)));
        return states.every((ti) => ti.state === 'scheduled');
      },
      { what: 'every task instance but one moved' },
    );
    const after = await waitFor(
      async () => {
        const samples = await scrape(base);
        // The gauges settle once the timed-out trigger's row is gone and the count is re-read.
        return samples.value('deferflow_triggers_running') === 1 && samples.value('deferflow_task_instances_deferred') === 1 ? samples : null;
      },
      { what: 'one trigger left running, one task instance deferred', timeoutMs: 20_000 },
    );
    expect(after.value('deferflow_triggerer_capacity_left')).toBe(9);
    expect(after.value('deferflow_triggers_succeeded_total', { classpath: 'test.DelayTrigger' })).toBe(1);
    expect(after.value('deferflow_triggers_succeeded_total', { classpath: 'test.BlockingTrigger' })).toBe(1);
    expect(after.value('deferflow_triggers_failed_total', { classpath: 'test.ThrowingTrigger' })).toBe(1);
    expect(after.sum('deferflow_triggers_failed_total')).toBe(1);
    expect(after.value('deferflow_triggers_timed_out_total')).toBe(1);
    // Events whose task instances' move was committed: the shared trigger's and the blocking one's.
    expect(after.value('deferflow_trigger_events_written_total')).toBe(2);
    expect(after.value('deferflow_trigger_event_commit_latency_seconds_count')).toBe(2);
    expect(after.value('deferflow_trigger_event_commit_latency_seconds_sum')).toBeGreaterThan(0);
    expect(after.value('deferflow_trigger_event_commit_latency_seconds_bucket', { le: '+Inf' })).toBe(2);
    // Five triggers (the two identical waits are one), claimed in one pass or a few.
    expect(after.value('deferflow_triggerer_claim_batch_size_sum')).toBe(5);
    expect(after.value('deferflow_triggerer_claim_batch_size_count')).toBeGreaterThanOrEqual(1);
    expect(after.value('deferflow_triggers_blocked_main_thread_total', { classpath: 'test.BlockingTrigger' })).toBeGreaterThanOrEqual(1);
    expect(after.value('deferflow_triggers_blocked_main_thread_seconds_total', { classpath: 'test.BlockingTrigger' })).toBeGreaterThanOrEqual(0.35);
    expect((await taskInstance(db, waiting.id)).state).toBe('deferred');

    const ok = await health(base);
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ status: 'ok', failing: [], checks: { event_loop: { ok: true }, triggerer: { ok: true, threshold_ms: 3000 } } });
    expect(Number(ok.body.checks.triggerer!.heartbeat_age_ms)).toBeLessThan(3000);

    await stopCleanly([triggerer]);
  });
});
