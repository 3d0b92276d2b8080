// Shared upstream streams across a crash, with real processes: two triggerers (the package's bin)
// run 100 tasks' waits on one Redis stream (RedisStreamTrigger, a filter each), one reader per
// triggerer. The one holding waits is SIGKILLed while the messages come; its peer takes the waits
// over and, reading from the earliest of their own starting points, resumes every task with its
// own message: nothing sent before, during or after the takeover is lost. The shared reader is
// dialect-free code and takeover is tested on each dialect in failover.test.ts: one dialect here.
import { createClient } from '@redis/client';
import { afterAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { RedisStreamTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { createTaskInstance, taskInstance, waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { spawnTriggerer, stopCleanly } from '../support/processes.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
afterAll(dropTestDatabases);
const scratch = processScratch();

describe.each(oneDialect)('shared upstream streams on %s', (dialect) => {
  it('a triggerer holding 100 waits on one stream is SIGKILLed as their messages come: its peer resumes every task with its own message', async () => {
    const db = await scratch.database(dialect);
    const redis = createClient({ url: REDIS_URL });
    await redis.connect();
    const stream = `deferflow-test-shared-crash-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
    try {
      const stores = openStores(db);
      const waitOn = async (order: number | string) => {
        const id = await createTaskInstance(db);
        const trigger = new RedisStreamTrigger({ connection: 'events', stream, jsonField: 'data', match: { order }, block: 0.2 });
        await stores.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
        return id;
      };
      const ids: number[] = [];
      for (let order = 0; order < 100; order++) ids.push(await waitOn(order));
      // One whose message never comes: the readers stay open to be counted.
      const never = await waitOn('never');
      const env = { DEFERFLOW_CONN_EVENTS: REDIS_URL };
      const triggerers = [spawnTriggerer(['--db', db.url, '--poll-interval', '0.2'], env), spawnTriggerer(['--db', db.url, '--poll-interval', '0.2'], env)];
      const jobs = await Promise.all(triggerers.map((triggerer) => triggerer.waitForJob(30_000)));
      const owners = async () => (await db.db.selectFrom('trigger').select('triggerer_id').execute()).map((row) => row.triggerer_id);
      await waitFor(async () => (await owners()).every((owner) => owner !== null), { what: 'every wait claimed', timeoutMs: 30_000 });
      const add = async (from: number, to: number) => {
        for (let order = from; order < to; order++) await redis.xAdd(stream, '*', { data: JSON.stringify({ order }) });
      };
      const scheduled = async () => (await Promise.all(ids.map((id) => taskInstance(db, id)))).filter((ti) => ti.state === 'scheduled').length;
      await add(0, 20);
      // The one holding the most waits still waiting dies mid-stream.
      const held = await owners();
      const victim = held.filter((owner) => owner === jobs[0]).length >= held.filter((owner) => owner === jobs[1]).length ? 0 : 1;
      triggerers[victim]!.kill('SIGKILL');
      await add(20, 60);
      await triggerers[victim]!.exit;
      await add(60, 100);
      await waitFor(async () => (await scheduled()) === 100, { what: 'all 100 tasks resumed', timeoutMs: 60_000 });
      expect((await taskInstance(db, never)).state).toBe('deferred');
      for (const [order, id] of ids.entries()) expect((await taskInstance(db, id)).next_event).toMatchObject({ stream, message: { order } });
      // The survivor reads the stream once for all the waits it holds (the one left among them).
      const survivor = triggerers[1 - victim]!;
      await waitFor(async () => (await owners()).every((owner) => owner === jobs[1 - victim]), { what: 'the survivor holding the wait left' });
      const readers = String(await redis.sendCommand(['CLIENT', 'LIST']))
        .split('\n')
        .filter((line) => line.includes(`name=deferflow-upstream-${survivor.child.pid} `) && / cmd=xread /.test(line));
      expect(readers).toHaveLength(1);
      await stopCleanly([survivor]);
    } finally {
      await redis.del(stream);
      await redis.quit();
    }
  }, 120_000);
});
