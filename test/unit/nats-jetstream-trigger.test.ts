// NatsJetStreamTrigger against real NATS servers with JetStream (the shared one on NATS_URL,
// default nats://127.0.0.1:4222, and one of the test's own that it kills and starts again), on an
// in-process triggerer, both dialects, judged by database rows and the consumer's own state: a
// task waiting for its own message, and a DAG scheduled on a stream, one run per matching
// message, acknowledged once committed, across a broker restart (SIGKILL) mid-stream.
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { NatsJetStreamTrigger } from '../../triggers/index.ts';
import { startNatsServer } from '../support/broker-servers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { countRows, createTaskInstance, migratedDatabase, taskInstance, waitFor } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';
import { processWatchingDags, runSharedWatchers } from '../support/watching-dags.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { triggerRefusal } from '../support/trigger-refusal.ts';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
afterAll(dropTestDatabases);

const unique = (what: string) => `deferflow_test_${what}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;

/** A client of the test's own (a broker restarted under it reconnects), and a stream made on it. */
async function natsClient(url: string): Promise<NatsConnection> {
  return connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
}
async function makeStream(client: NatsConnection, name: string): Promise<string> {
  const manager = await jetstreamManager(client);
  await manager.streams.add({ name, subjects: [`${name}.>`] });
  return `${name}.orders`;
}

describe('NatsJetStreamTrigger kwargs', () => {
  it('refuses what it cannot read, naming the field; stores a watcher without the wait-only start', () => {
    const refused = (kwargs: unknown) => triggerRefusal(NatsJetStreamTrigger, kwargs);
    expect(refused({ connection: 'nats', stream: 'a.b' })).toMatch(/stream "a.b" is not a stream name/);
    expect(refused({ connection: 'nats', stream: 's', block: 0.5 })).toMatch(/block number 0.5 is not a number of seconds from 1 to 60/);
    expect(refused({ connection: 'nats', stream: 's', after: 'soon' })).toMatch(/after "soon" is not an ISO 8601 moment/);
    expect(refused({ connection: 'nats', stream: 's', start: 'first' })).toMatch(/start "first" must be "new"/);
    expect(refused({ connection: 'nats', stream: 's', durable: 'x' })).toMatch(/unknown field "durable"/);
    expect(refused({ connection: 'nats', stream: 's', shared: 1 })).toMatch(/shared number 1 is not true or false/);
    const trigger = new NatsJetStreamTrigger({ connection: 'nats', stream: 's', subject: 's.orders', match: { kind: 'order' } });
    expect(Date.parse(trigger.serialize().kwargs.after as string)).toBeLessThanOrEqual(Date.now());
    expect(trigger.serializeAsWatcher().kwargs).not.toHaveProperty('after');
  });
});

describe.each(testDialects)('NatsJetStreamTrigger on %s', (dialect) => {
  const open: { close(): Promise<unknown> }[] = [];
  let shared: NatsConnection;
  beforeAll(async () => {
    shared = await natsClient(NATS_URL);
  });
  afterAll(async () => {
    await shared.close();
  });
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_TEST_NATS;
  });
  const database = async (natsUrl = NATS_URL) => {
    process.env.DEFERFLOW_CONN_TEST_NATS = natsUrl;
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const triggerer = async (db: Awaited<ReturnType<typeof database>>) => {
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    return tr;
  };

  it('a task waits for its own message: one stored after it deferred, matching its filter', async () => {
    const db = await database();
    const name = unique('wait');
    const subject = await makeStream(shared, name);
    open.push({ close: () => jetstreamManager(shared).then((manager) => manager.streams.delete(name)) });
    const js = jetstream(shared);
    // Before the task deferred: not its message, though it matches.
    await js.publish(subject, JSON.stringify({ order: 42, when: 'before' }));
    // Stored: the wait made from the next millisecond but one on takes only what comes after it.
    const stored = Date.now();
    await waitFor(() => Date.now() > stored + 1, { what: 'the clock to move on' });
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({
        trigger: new NatsJetStreamTrigger({ connection: 'test_nats', stream: name, subject, match: { order: 42 }, block: 1 }),
        method: 'resume',
      }),
    );
    await triggerer(db);
    await js.publish(subject, JSON.stringify({ order: 41, when: 'after' }));
    const mine = await js.publish(subject, JSON.stringify({ order: 42, when: 'after' }));
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the task to resume', timeoutMs: 15_000 });
    expect((await taskInstance(db, id)).next_event).toEqual({ stream: name, subject, seq: mine.seq, message: { order: 42, when: 'after' } });
  }, 60_000);

  it('waits on one stream share one reader: each resumes with its own message, one deferred late with what the reader had passed', async () => {
    const broker = new URL(NATS_URL);
    const proxy = await startTcpProxy(Number(broker.port || 4222), broker.hostname);
    open.push({ close: () => proxy.close() });
    const db = await database(`nats://127.0.0.1:${proxy.port}`);
    const name = unique('shared');
    const subject = await makeStream(shared, name);
    open.push({ close: () => jetstreamManager(shared).then((manager) => manager.streams.delete(name)) });
    const js = jetstream(shared);
    const waitOn = async (
      order: number | string,
      trigger = new NatsJetStreamTrigger({ connection: 'test_nats', stream: name, subject, match: { order }, block: 1 }),
    ) => {
      const id = await createTaskInstance(db);
      await openStores(db).taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
      return id;
    };
    const ids = [await waitOn(1), await waitOn(2), await waitOn(3), await waitOn(4)];
    // Two stored before any triggerer runs: the reader starts at the earliest wait's start.
    await js.publish(subject, JSON.stringify({ order: 1 }));
    await js.publish(subject, JSON.stringify({ order: 2 }));
    await triggerer(db);
    let connections = 0;
    const resumed = async (wanted: number[]) => {
      connections = Math.max(connections, proxy.openConnections);
      return (await Promise.all(wanted.map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled');
    };
    await waitFor(() => resumed(ids.slice(0, 2)), { what: 'the first two tasks to resume', timeoutMs: 15_000 });
    // A wait made before its message but deferred once the reader has read past it: its message comes from the history.
    const late = new NatsJetStreamTrigger({ connection: 'test_nats', stream: name, subject, match: { order: 'late' }, block: 1 });
    const lateMessage = await js.publish(subject, JSON.stringify({ order: 'late' }));
    await js.publish(subject, JSON.stringify({ order: 3 }));
    await js.publish(subject, JSON.stringify({ order: 4 }));
    await waitFor(() => resumed(ids), { what: 'all four tasks to resume', timeoutMs: 15_000 });
    const lateId = await waitOn('late', late);
    await waitFor(() => resumed([lateId]), { what: 'the late wait to resume', timeoutMs: 15_000 });
    expect((await taskInstance(db, lateId)).next_event).toEqual({ stream: name, subject, seq: lateMessage.seq, message: { order: 'late' } });
    for (const [index, id] of ids.entries()) expect((await taskInstance(db, id)).next_event).toMatchObject({ stream: name, message: { order: index + 1 } });
    // Five waits, one connection through the proxy (the most seen while they waited).
    expect(connections).toBe(1);
  }, 60_000);

  it('shared watchers: two DAGs with different filters read through one reader from their cursors, no durable consumer; a new triggerer reads on from the cursors', async () => {
    const db = await database();
    const name = unique('shared_watch');
    const subject = await makeStream(shared, name);
    open.push({ close: () => jetstreamManager(shared).then((manager) => manager.streams.delete(name)) });
    const js = jetstream(shared);
    await runSharedWatchers(db, {
      watcher: (kind) => new NatsJetStreamTrigger({ connection: 'test_nats', stream: name, subject, match: { kind }, shared: true, batch: 10, block: 1 }),
      publish: async (from, to) => {
        for (let i = from; i < to; i++) await js.publish(subject, JSON.stringify({ kind: i % 2 === 0 ? 'paid' : 'refund', n: i }));
      },
      // No durable consumer: their positions are their cursors.
      whileRunning: async () => {
        const manager = await jetstreamManager(shared);
        const durables = (await manager.consumers.list(name).next()).filter((consumer) => consumer.config.durable_name !== undefined);
        expect(durables).toEqual([]);
      },
      startAgain: () => triggerer(db),
    });
  }, 60_000);

  it('a DAG scheduled on a stream: one run per matching message, all acknowledged once committed, across a broker restart', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'deferflow-nats-'));
    const server = await startNatsServer(dir);
    open.push({
      close: async () => {
        await server.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    });
    const own = await natsClient(server.url);
    open.push({ close: () => own.close() });
    const name = unique('watch');
    const subject = await makeStream(own, name);
    const db = await database(server.url);
    const watch = new NatsJetStreamTrigger({ connection: 'test_nats', stream: name, match: { kind: 'order' }, batch: 50, block: 1, ackWait: 2 });
    // Its own durable consumer (a watcher of the stream with another filter gets another).
    expect(watch.consumer).toMatch(/^deferflow-[0-9a-f]{12}$/);
    await processWatchingDags(db, [{ dagId: 'orders', watch }]);
    await triggerer(db);
    const manager = await jetstreamManager(own);
    // The watcher made its durable consumer: messages from now on are its.
    await waitFor(
      () =>
        manager.consumers.info(name, watch.consumer).then(
          () => true,
          () => false,
        ),
      { what: 'the durable consumer', timeoutMs: 60_000 },
    );
    const js = jetstream(own);
    const add = async (from: number, to: number) => {
      for (let i = from; i < to; i++) await js.publish(subject, JSON.stringify({ kind: i % 2 === 0 ? 'order' : 'refund', n: i }), { retries: 20 });
    };
    const runs = () => countRows(db, 'dag_run');
    await add(0, 200);
    await waitFor(async () => (await runs()) >= 40, { what: 'runs being made', timeoutMs: 60_000 });
    // The broker killed (SIGKILL) and started again mid-stream: what it stored, it keeps.
    await server.restart();
    await add(200, 400);
    await waitFor(async () => (await runs()) === 200, { what: 'one run per order message (200)', timeoutMs: 90_000 });
    const unacknowledged = async () => {
      const info = await manager.consumers.info(name, watch.consumer);
      return info.num_ack_pending + info.num_pending;
    };
    await waitFor(async () => (await unacknowledged()) === 0, { what: 'every message acknowledged', timeoutMs: 30_000 });
    const runIds = (await db.db.selectFrom('dag_run').select('run_id').execute()).map((row) => row.run_id);
    expect(new Set(runIds).size).toBe(200);
    const first = await db.db.selectFrom('dag_run').select('conf').orderBy('logical_date').limit(1).executeTakeFirstOrThrow();
    expect(JSON.parse(first.conf).event.payload).toMatchObject({ stream: name, subject, message: { kind: 'order', n: 0 } });
  }, 300_000);
});
