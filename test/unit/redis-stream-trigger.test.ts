// RedisStreamTrigger against real Redis servers (the shared one on REDIS_URL, default
// redis://127.0.0.1:6379, and one of the test's own that it kills and starts again), on an
// in-process triggerer, both dialects, judged by database rows and the stream's own state: a
// task waiting for its own message, and a DAG scheduled on a stream, one run per matching
// message, acknowledged once committed, across broker restarts mid-stream and a connection lost
// between a read and its reply (through a proxy that drops the reply).
import { createClient } from '@redis/client';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { RedisStreamTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { countRows, createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';
import { startRedisServer, type BrokerServer } from '../support/broker-servers.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { processWatchingDags, runSharedWatchers } from '../support/watching-dags.ts';
import { triggerRefusal } from '../support/trigger-refusal.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
afterAll(dropTestDatabases);

const streamName = (what: string) => `deferflow-test-${what}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

describe('RedisStreamTrigger kwargs', () => {
  it('refuses what it cannot read, naming the field; stores a watcher without the wait-only start', () => {
    const refused = (kwargs: unknown) => triggerRefusal(RedisStreamTrigger, kwargs);
    expect(refused({ connection: 'redis', stream: '' })).toMatch(/stream "" is not a stream key/);
    expect(refused({ connection: 'a b', stream: 's' })).toMatch(/connection "a b" is not a connection name/);
    expect(refused({ connection: 'redis', stream: 's', batch: 0 })).toMatch(/batch number 0 is not a whole number from 1 to 10000/);
    expect(refused({ connection: 'redis', stream: 's', after: 'soon' })).toMatch(/after "soon" is not a stream id/);
    expect(refused({ connection: 'redis', stream: 's', stream_name: 'x' })).toMatch(/unknown field "stream_name"/);
    expect(refused({ connection: 'redis', stream: 's', shared: 'yes' })).toMatch(/shared "yes" is not true or false/);
    const trigger = new RedisStreamTrigger({ connection: 'redis', stream: 's', match: { kind: 'order' } });
    expect(trigger.serialize().kwargs.after).toMatch(/^\d+-18446744073709551615$/);
    expect(trigger.serializeAsWatcher().kwargs).not.toHaveProperty('after');
  });
});

describe.each(testDialects)('RedisStreamTrigger on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  const redis = createClient({ url: REDIS_URL });
  beforeAll(async () => {
    await redis.connect();
  });
  afterAll(async () => {
    await redis.quit();
  });
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_TEST_REDIS;
  });
  const database = async (redisUrl = REDIS_URL) => {
    process.env.DEFERFLOW_CONN_TEST_REDIS = redisUrl;
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const triggerer = async (db: TestDatabase) => {
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    return tr;
  };

  it('a task waits for its own message: one added after it deferred, matching its filter', async () => {
    const db = await database();
    const stream = streamName('wait');
    // Before the task deferred (in an earlier millisecond: a wait takes its own one's): not its message, though it matches.
    const before = await redis.xAdd(stream, '*', { data: JSON.stringify({ order: 42, when: 'before' }) });
    await waitFor(() => Date.now() > Number(before.split('-')[0]), { what: 'the next millisecond' });
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({
        trigger: new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { order: 42 }, block: 0.2 }),
        method: 'resume',
      }),
    );
    await triggerer(db);
    await redis.xAdd(stream, '*', { data: JSON.stringify({ order: 41, when: 'after' }) });
    const mine = await redis.xAdd(stream, '*', { data: JSON.stringify({ order: 42, when: 'after' }) });
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the task to resume', timeoutMs: 15_000 });
    expect((await taskInstance(db, id)).next_event).toEqual({ stream, id: mine, message: { order: 42, when: 'after' } });
    await redis.del(stream);
  }, 60_000);

  it('tasks waiting on one stream share one reader: each resumes with its own message, one deferred late with what the reader had passed', async () => {
    const db = await database();
    const stream = streamName('shared');
    const stores = openStores(db);
    const waitOn = async (
      order: number | string,
      trigger = new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { order }, block: 0.2 }),
    ) => {
      const id = await createTaskInstance(db);
      await stores.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
      return id;
    };
    const ids: number[] = [];
    for (let order = 0; order < 120; order++) ids.push(await waitOn(order));
    const add = (order: number | string) => redis.xAdd(stream, '*', { data: JSON.stringify({ order }) });
    // Half the messages come before any triggerer runs: the reader starts at the earliest wait's start.
    for (let order = 0; order < 60; order++) await add(order);
    await triggerer(db);
    const resumed = async (wanted: number[]) => (await Promise.all(wanted.map((id) => taskInstance(db, id)))).filter((ti) => ti.state === 'scheduled');
    await waitFor(async () => (await resumed(ids.slice(0, 60))).length === 60, { what: 'the first 60 tasks to resume', timeoutMs: 30_000 });
    const clients = async () =>
      String(await redis.sendCommand(['CLIENT', 'LIST']))
        .split('\n')
        .filter((line) => line.includes(`name=deferflow-upstream-${process.pid} `));
    expect((await clients()).filter((line) => / cmd=xread /.test(line)).length).toBeLessThanOrEqual(1);
    expect((await clients()).length).toBeLessThanOrEqual(2);
    // A wait made before its message but deferred only once the reader has read past it: its message comes from the history.
    const late = new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { order: 'late' }, block: 0.2 });
    const lateMessage = await add('late');
    for (let order = 60; order < 120; order++) await add(order);
    await waitFor(async () => (await resumed(ids)).length === 120, { what: 'all 120 tasks to resume', timeoutMs: 30_000 });
    const lateId = await waitOn('late', late);
    await waitFor(async () => (await taskInstance(db, lateId)).state === 'scheduled', { what: 'the late wait to resume', timeoutMs: 15_000 });
    expect((await taskInstance(db, lateId)).next_event).toEqual({ stream, id: lateMessage, message: { order: 'late' } });
    for (const [order, id] of ids.entries()) expect((await taskInstance(db, id)).next_event).toMatchObject({ stream, message: { order } });
    expect(await clients()).toHaveLength(2);
    for (const item of open.splice(1).reverse()) await item.close();
    await waitFor(async () => (await clients()).length === 0, { what: "the triggerer's reader connections to close" });
    await redis.del(stream);
  }, 90_000);

  it('a DAG scheduled on a stream: one run per matching message, all acknowledged once committed', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'deferflow-redis-'));
    const server: BrokerServer = await startRedisServer(dir);
    open.push({
      close: async () => {
        await server.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    });
    const db = await database(server.url);
    const stream = streamName('watch');
    const watch = new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { kind: 'order' }, batch: 50, block: 0.2 });
    await processWatchingDags(db, [{ dagId: 'orders', watch }]);
    await triggerer(db);
    const own = createClient({ url: server.url });
    own.on('error', () => {});
    await own.connect();
    open.push({ close: () => own.destroy() as unknown as Promise<void> });
    // The watcher made its consumer group: messages from now on are its.
    await waitFor(async () => (await own.exists(stream)) === 1, { what: 'the consumer group', timeoutMs: 60_000 });
    const add = async (from: number, to: number) => {
      for (let i = from; i < to; i++) await own.xAdd(stream, '*', { data: JSON.stringify({ kind: i % 2 === 0 ? 'order' : 'refund', n: i }) });
    };
    const runs = () => countRows(db, 'dag_run');
    await add(0, 200);
    await waitFor(async () => (await runs()) >= 40, { what: 'runs being made', timeoutMs: 60_000 });
    // The broker killed (SIGKILL) and started again mid-stream, twice: what it had, it keeps (AOF).
    await server.restart();
    await add(200, 300);
    await server.restart();
    await add(300, 400);
    await waitFor(async () => (await runs()) === 200, { what: 'one run per order message (200)', timeoutMs: 90_000 });
    const pending = async () => (await own.xPending(stream, watch.group)).pending;
    await waitFor(async () => (await pending()) === 0, { what: 'every message acknowledged', timeoutMs: 30_000 });
    const runIds = (await db.db.selectFrom('dag_run').select('run_id').execute()).map((row) => row.run_id);
    expect(new Set(runIds).size).toBe(200);
    const first = await db.db.selectFrom('dag_run').select('conf').orderBy('logical_date').limit(1).executeTakeFirstOrThrow();
    expect(JSON.parse(first.conf).event.payload).toMatchObject({ stream, message: { kind: 'order', n: 0 } });
  }, 300_000);

  it('two DAGs watching one stream with different filters each get a run for every message of theirs (a consumer group each)', async () => {
    const db = await database();
    const stream = streamName('filters');
    const watcher = (kind: string) => new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { kind }, block: 0.2 });
    expect(watcher('paid').group).not.toBe(watcher('refund').group);
    expect(new RedisStreamTrigger({ connection: 'test_redis', stream }).group).toBe('deferflow');
    await processWatchingDags(db, [
      { dagId: 'paid', watch: watcher('paid') },
      { dagId: 'refunds', watch: watcher('refund') },
    ]);
    await triggerer(db);
    await waitFor(async () => (await redis.exists(stream)) === 1 && (await redis.xInfoGroups(stream)).length === 2, {
      what: 'both consumer groups',
      timeoutMs: 30_000,
    });
    for (let i = 0; i < 40; i++) await redis.xAdd(stream, '*', { data: JSON.stringify({ kind: i % 2 === 0 ? 'paid' : 'refund', n: i }) });
    const runsOf = async (dagId: string) => (await db.db.selectFrom('dag_run').select('run_id').where('dag_id', '=', dagId).execute()).length;
    await waitFor(async () => (await runsOf('paid')) === 20 && (await runsOf('refunds')) === 20, { what: '20 runs of each DAG', timeoutMs: 30_000 });
    await redis.del(stream);
  }, 60_000);

  it('shared watchers: two DAGs with different filters read through one reader from their cursors, no consumer group; a new triggerer reads on from the cursors', async () => {
    const db = await database();
    const stream = streamName('shared-watch');
    await runSharedWatchers(db, {
      watcher: (kind) => new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', match: { kind }, shared: true, batch: 10, block: 0.2 }),
      publish: async (from, to) => {
        for (let i = from; i < to; i++) await redis.xAdd(stream, '*', { data: JSON.stringify({ kind: i % 2 === 0 ? 'paid' : 'refund', n: i }) });
      },
      // One reader for both, and no consumer group or watcher connection of their own.
      whileRunning: async () => {
        const clients = async (role: string) =>
          String(await redis.sendCommand(['CLIENT', 'LIST']))
            .split('\n')
            .filter((line) => line.includes(`name=deferflow-${role}-${process.pid} `));
        expect((await clients('upstream')).filter((line) => / cmd=xread /.test(line)).length).toBe(1);
        expect(await clients('watcher')).toEqual([]);
        expect(await redis.xInfoGroups(stream)).toEqual([]);
      },
      startAgain: () => triggerer(db),
    });
    await redis.del(stream);
  }, 60_000);

  it('a connection lost between a read and its reply: the messages the broker delivered unseen are handed over once reconnected', async () => {
    const proxy = await startTcpProxy(Number(new URL(REDIS_URL).port || 6379), new URL(REDIS_URL).hostname);
    open.push({ close: () => proxy.close() });
    const db = await database(`redis://127.0.0.1:${proxy.port}`);
    const stream = streamName('cut');
    await processWatchingDags(db, [{ dagId: 'orders', watch: new RedisStreamTrigger({ connection: 'test_redis', stream, jsonField: 'data', block: 5 }) }]);
    const tr = await triggerer(db);
    // The watcher blocked in its read (past its first claim of pending messages, whose reply the
    // proxy would drop too): the broker hands it the messages, whose reply the proxy drops.
    await waitFor(async () => /cmd=xreadgroup .*flags=b|flags=b.*cmd=xreadgroup/.test(String(await redis.sendCommand(['CLIENT', 'LIST']))), {
      what: 'the watcher blocked in XREADGROUP',
      timeoutMs: 60_000,
    });
    proxy.dropReplies();
    for (let i = 0; i < 5; i++) await redis.xAdd(stream, '*', { data: JSON.stringify({ n: i }) });
    // Its blocked read returns with what came first: those are delivered (pending), unseen.
    await waitFor(async () => (await redis.xPending(stream, 'deferflow')).pending > 0, { what: 'messages delivered (pending)', timeoutMs: 30_000 });
    expect(await countRows(db, 'dag_run')).toBe(0);
    proxy.cut();
    await waitFor(async () => (await countRows(db, 'dag_run')) === 5, {
      what: 'a run for each message, those delivered before the cut too (5)',
      timeoutMs: 60_000,
    });
    await waitFor(async () => (await redis.xPending(stream, 'deferflow')).pending === 0, { what: 'the 5 acknowledged', timeoutMs: 30_000 });
    expect(tr.logs.matching((line) => /connection lost/.test(String(line.msg))).length).toBeGreaterThan(0);
    await redis.del(stream);
  }, 120_000);
});
