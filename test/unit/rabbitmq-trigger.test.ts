// RabbitMqTrigger against the RabbitMQ server of the development machine and CI (RABBITMQ_URL,
// default amqp://guest:guest@127.0.0.1:5672), on an in-process triggerer, both dialects, judged
// by database rows and the queue's own state: a task waiting for its own message on an exchange,
// and a DAG scheduled on a queue, one run per matching message across connections cut mid-stream
// (through a proxy: the broker delivers again what was not acknowledged, and no run is made twice).
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { RabbitMqTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { countRows, createTaskInstance, migratedDatabase, taskInstance, waitFor } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { processWatchingDags, runSharedWatchers } from '../support/watching-dags.ts';
import { triggerRefusal } from '../support/trigger-refusal.ts';

const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
afterAll(dropTestDatabases);

const unique = (what: string) => `deferflow-test.${what}.${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

describe('RabbitMqTrigger kwargs', () => {
  it('refuses what it cannot read, naming the field', () => {
    const refused = (kwargs: unknown) => triggerRefusal(RabbitMqTrigger, kwargs);
    expect(refused({ connection: 'bus' })).toMatch(/give an exchange \(a wait binds to it\) or a queue/);
    expect(refused({ connection: 'bus', queue: 'amq.gen-1' })).toMatch(/queue "amq.gen-1" is not a queue name/);
    expect(refused({ connection: 'bus', exchange: 'a b' })).toMatch(/exchange "a b" is not an exchange name/);
    expect(refused({ connection: 'bus', exchange: 'orders', routing_key: 'x' })).toMatch(/unknown field "routing_key"/);
    expect(new RabbitMqTrigger({ connection: 'bus', exchange: 'orders' }).serialize().kwargs).toEqual({
      connection: 'bus',
      exchange: 'orders',
      routingKey: '#',
      batch: 100,
    });
    expect(refused({ connection: 'bus', exchange: 'orders', shared: 'yes' })).toMatch(/shared "yes" is not true or false/);
    // Shared, a watcher's row leaves its match out, as the DAG's own event filter on the message.
    expect(new RabbitMqTrigger({ connection: 'bus', exchange: 'orders', match: { kind: 'paid' }, shared: true }).serializeAsWatcher()).toEqual({
      classpath: RabbitMqTrigger.classpath,
      kwargs: { connection: 'bus', exchange: 'orders', routingKey: '#', batch: 100, shared: true },
      eventFilter: { message: { kind: 'paid' } },
    });
  });
});

describe.each(testDialects)('RabbitMqTrigger on %s', (dialect) => {
  const open: { close(): Promise<unknown> }[] = [];
  let broker: ChannelModel;
  let channel: Channel;
  beforeAll(async () => {
    broker = await connect(RABBITMQ_URL);
    channel = await broker.createChannel();
  });
  afterAll(async () => {
    await broker.close();
  });
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_TEST_AMQP;
  });
  const database = async (url = RABBITMQ_URL) => {
    process.env.DEFERFLOW_CONN_TEST_AMQP = url;
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  /** The queue's counts, or null if it does not exist (on a channel of its own: a missing queue closes the channel that asked). */
  const queueState = async (name: string) => {
    const probe = await broker.createChannel();
    probe.on('error', () => {});
    try {
      return await probe.checkQueue(name);
    } catch {
      return null;
    } finally {
      await probe.close().catch(() => {});
    }
  };
  const exchange = async (what: string) => {
    const name = unique(what);
    await channel.assertExchange(name, 'topic', { durable: false });
    open.push({ close: () => channel.deleteExchange(name) });
    return name;
  };

  it('a task waits for its own message on an exchange, routed after its queue was bound', async () => {
    const db = await database();
    const orders = await exchange('wait');
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({
        trigger: new RabbitMqTrigger({ connection: 'test_amqp', exchange: orders, routingKey: 'order.*', match: { order: 42 } }),
        method: 'resume',
      }),
    );
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    // Published until the wait has bound its queue (AMQP keeps no history for a new queue).
    await waitFor(
      async () => {
        channel.publish(orders, 'order.paid', Buffer.from(JSON.stringify({ order: 41 })));
        channel.publish(orders, 'refund.paid', Buffer.from(JSON.stringify({ order: 42, kind: 'refund' })));
        channel.publish(orders, 'order.paid', Buffer.from(JSON.stringify({ order: 42, kind: 'order' })), { messageId: 'm-42' });
        return (await taskInstance(db, id)).state === 'scheduled';
      },
      { what: 'the task to resume', timeoutMs: 15_000, intervalMs: 200 },
    );
    expect((await taskInstance(db, id)).next_event).toEqual({
      exchange: orders,
      routingKey: 'order.paid',
      messageId: 'm-42',
      message: { order: 42, kind: 'order' },
    });
  }, 60_000);

  it('waits on one exchange and routing key share one queue: each resumes with its own message', async () => {
    const url = new URL(RABBITMQ_URL);
    const proxy = await startTcpProxy(Number(url.port || 5672), url.hostname);
    open.push({ close: () => proxy.close() });
    url.host = `127.0.0.1:${proxy.port}`;
    const db = await database(url.toString());
    const orders = await exchange('shared');
    const ids: number[] = [];
    for (const order of [1, 2, 3, 4]) {
      const id = await createTaskInstance(db);
      await openStores(db).taskInstances.deferTaskInstance(
        id,
        new TaskDeferred({
          trigger: new RabbitMqTrigger({ connection: 'test_amqp', exchange: orders, routingKey: 'order.*', match: { order } }),
          method: 'resume',
        }),
      );
      ids.push(id);
    }
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('triggerer_id', 'is', null).execute()).length === 0, {
      what: 'the waits running',
    });
    // Published until the shared queue is bound (AMQP keeps no history for a new queue).
    let connections = 0;
    await waitFor(
      async () => {
        connections = Math.max(connections, proxy.openConnections);
        for (const order of [1, 2, 3, 4]) channel.publish(orders, 'order.paid', Buffer.from(JSON.stringify({ order })), { messageId: `m-${order}` });
        return (await Promise.all(ids.map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled');
      },
      { what: 'the four tasks to resume', timeoutMs: 15_000, intervalMs: 200 },
    );
    for (const [index, id] of ids.entries())
      expect((await taskInstance(db, id)).next_event).toEqual({
        exchange: orders,
        routingKey: 'order.paid',
        messageId: `m-${index + 1}`,
        message: { order: index + 1 },
      });
    // Four waits, one connection through the proxy (the most seen while they waited): the triggerer's shared queue.
    expect(connections).toBe(1);
  }, 60_000);

  it('shared watchers: two DAGs with different filters are one row and one queue with one consumer, each DAG taking its own messages; a new triggerer reads on, none twice', async () => {
    const db = await database();
    const orders = await exchange('shared-watch');
    const queue = unique('shared-queue');
    open.push({ close: () => channel.deleteQueue(queue) });
    await runSharedWatchers(db, {
      watcher: (kind) => new RabbitMqTrigger({ connection: 'test_amqp', exchange: orders, queue, match: { kind }, batch: 10, shared: true }),
      started: async () => (await queueState(queue))?.consumerCount === 1,
      publish: async (from, to) => {
        for (let i = from; i < to; i++)
          channel.publish(orders, 'order', Buffer.from(JSON.stringify({ kind: i % 2 === 0 ? 'paid' : 'refund', n: i })), { messageId: `m-${i}` });
      },
      whileRunning: async () => {
        expect(await countRows(db, 'trigger')).toBe(1);
        expect(await queueState(queue)).toMatchObject({ consumerCount: 1, messageCount: 0 });
      },
      startAgain: async () => {
        const again = await startTriggerer(db);
        open.push({ close: () => again.stop() });
      },
    });
    // Every message acknowledged once both DAGs' runs were written.
    await waitFor(async () => (await queueState(queue))?.messageCount === 0, { what: 'the queue drained' });
    // What dags list and the DAG page show: one row, each DAG with the events it takes.
    const listed = await openStores(db).serializedDags.listDagWatchers();
    expect(listed.map((watcher) => [watcher.dagId, watcher.triggerId, watcher.eventFilters])).toEqual([
      ['paid', listed[0]!.triggerId, [{ message: { kind: 'paid' } }]],
      ['refunds', listed[0]!.triggerId, [{ message: { kind: 'refund' } }]],
    ]);
  }, 120_000);

  it('a DAG scheduled on a queue: one run per matching message, acknowledged once committed, across connections cut mid-stream', async () => {
    const url = new URL(RABBITMQ_URL);
    const proxy = await startTcpProxy(Number(url.port || 5672), url.hostname);
    open.push({ close: () => proxy.close() });
    url.host = `127.0.0.1:${proxy.port}`;
    const db = await database(url.toString());
    const orders = await exchange('watch');
    const queue = unique('queue');
    open.push({ close: () => channel.deleteQueue(queue) });
    await processWatchingDags(db, [
      {
        dagId: 'orders',
        watch: new RabbitMqTrigger({ connection: 'test_amqp', exchange: orders, routingKey: 'order.#', queue, match: { kind: 'order' }, batch: 20 }),
      },
    ]);
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    // The watcher declared its queue and bound it: messages from now on are its.
    await waitFor(async () => (await queueState(queue))?.consumerCount === 1, { what: 'the watcher consuming', timeoutMs: 30_000 });
    const add = (from: number, to: number) => {
      for (let i = from; i < to; i++)
        channel.publish(orders, 'order.created', Buffer.from(JSON.stringify({ kind: i % 2 === 0 ? 'order' : 'refund', n: i })), { messageId: `m-${i}` });
    };
    const runs = () => countRows(db, 'dag_run');
    add(0, 200);
    await waitFor(async () => (await runs()) >= 20, { what: 'runs being made', timeoutMs: 60_000 });
    // Cut with batches in flight: what was delivered and not acknowledged comes again.
    proxy.cut();
    add(200, 300);
    await waitFor(async () => (await runs()) >= 120, { what: 'runs after the first cut', timeoutMs: 60_000 });
    proxy.cut();
    add(300, 400);
    await waitFor(async () => (await runs()) === 200, { what: 'one run per order message (200)', timeoutMs: 90_000 });
    expect(tr.triggerer).toBeDefined();
    const cursor = async () => (await db.db.selectFrom('trigger').select('cursor').executeTakeFirstOrThrow()).cursor;
    const cursorAtStop = await cursor();
    await tr.stop();
    // Stopped, its connection closed: what it had not acknowledged is back in the queue. A stop
    // between a batch's commit and its acknowledgement leaves at most that batch; consumed again,
    // its keys make no second run.
    const left = (await queueState(queue))?.messageCount ?? 0;
    expect(left).toBeLessThanOrEqual(20);
    if (left > 0) {
      const again = await startTriggerer(db);
      open.push({ close: () => again.stop() });
      await waitFor(async () => (await cursor()) !== cursorAtStop && (await queueState(queue))?.messageCount === 0, {
        what: 'the batch left at the stop read again',
        timeoutMs: 30_000,
      });
      await again.stop();
    }
    const runIds = (await db.db.selectFrom('dag_run').select('run_id').execute()).map((row) => row.run_id);
    expect(runIds).toHaveLength(200);
    expect(new Set(runIds).size).toBe(200);
    expect(tr.logs.matching((line) => /connection lost/.test(String(line.msg))).length).toBeGreaterThan(0);
  }, 300_000);
});
