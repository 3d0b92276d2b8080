// MqttTrigger against real MQTT brokers (the shared Mosquitto on MQTT_URL, default
// mqtt://127.0.0.1:1883, and one of the test's own that it stops and starts again), on an
// in-process triggerer, both dialects, judged by database rows: a task waiting for its own
// message, and a DAG scheduled on a topic, one run per matching message (a message delivered
// again makes no second run), with the broker restarted mid-stream.
import { connectAsync, type MqttClient } from 'mqtt';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { MqttTrigger } from '../../triggers/index.ts';
import { startMosquitto } from '../support/broker-servers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { countRows, createTaskInstance, migratedDatabase, taskInstance, waitFor } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';
import { processWatchingDags, runSharedWatchers } from '../support/watching-dags.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { triggerRefusal } from '../support/trigger-refusal.ts';

const MQTT_URL = process.env.MQTT_URL ?? 'mqtt://127.0.0.1:1883';
afterAll(dropTestDatabases);

const unique = (what: string) => `deferflow-test/${what}/${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

describe('MqttTrigger kwargs', () => {
  it('refuses what it cannot read, naming the field', () => {
    const refused = (kwargs: unknown) => triggerRefusal(MqttTrigger, kwargs);
    expect(refused({ connection: 'mqtt', topic: 'a/#/b' })).toMatch(/topic "a\/#\/b" is not a topic filter/);
    expect(refused({ connection: 'mqtt', topic: 'a/b+' })).toMatch(/topic "a\/b\+" is not a topic filter/);
    expect(refused({ connection: 'mqtt', topic: 'a', session: 'x y' })).toMatch(/session "x y" is not a session name/);
    expect(refused({ connection: 'mqtt', topic: 'a', qos: 2 })).toMatch(/unknown field "qos"/);
    expect(new MqttTrigger({ connection: 'mqtt', topic: 'plant/+/temperature' }).serialize().kwargs).toEqual({
      connection: 'mqtt',
      topic: 'plant/+/temperature',
      session: 'deferflow',
    });
    expect(refused({ connection: 'mqtt', topic: 'a', shared: 1 })).toMatch(/shared number 1 is not true or false/);
    // Shared, a watcher's row leaves its match out, as the DAG's own event filter on the message.
    expect(new MqttTrigger({ connection: 'mqtt', topic: 'a/#', match: { kind: 'paid' }, shared: true }).serializeAsWatcher()).toEqual({
      classpath: MqttTrigger.classpath,
      kwargs: { connection: 'mqtt', topic: 'a/#', session: 'deferflow', shared: true },
      eventFilter: { message: { kind: 'paid' } },
    });
    expect(new MqttTrigger({ connection: 'mqtt', topic: 'a/#', match: { kind: 'paid' } }).serializeAsWatcher().kwargs.match).toEqual({ kind: 'paid' });
  });
});

describe.each(testDialects)('MqttTrigger on %s', (dialect) => {
  const open: { close(): Promise<unknown> }[] = [];
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_TEST_MQTT;
  });
  const database = async (mqttUrl = MQTT_URL) => {
    process.env.DEFERFLOW_CONN_TEST_MQTT = mqttUrl;
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const client = async (url: string): Promise<MqttClient> => {
    const own = await connectAsync(url, { reconnectPeriod: 100 });
    own.on('error', () => {});
    open.push({ close: () => own.endAsync(true) });
    return own;
  };

  it('a task waits for its own message, published after its triggerer subscribed', async () => {
    const db = await database();
    const topic = unique('wait');
    const own = await client(MQTT_URL);
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({ trigger: new MqttTrigger({ connection: 'test_mqtt', topic: `${topic}/+`, match: { order: 42 } }), method: 'resume' }),
    );
    // A retained message is from before: never the task's, though it matches.
    await own.publishAsync(`${topic}/old`, JSON.stringify({ order: 42, when: 'retained' }), { qos: 1, retain: true });
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    // Published until the wait has subscribed (MQTT keeps no history for a new subscriber).
    await waitFor(
      async () => {
        await own.publishAsync(`${topic}/a`, JSON.stringify({ order: 41 }), { qos: 1 });
        await own.publishAsync(`${topic}/b`, JSON.stringify({ order: 42, when: 'after' }), { qos: 1 });
        return (await taskInstance(db, id)).state === 'scheduled';
      },
      { what: 'the task to resume', timeoutMs: 15_000, intervalMs: 200 },
    );
    expect((await taskInstance(db, id)).next_event).toEqual({ topic: `${topic}/b`, message: { order: 42, when: 'after' } });
    await own.publishAsync(`${topic}/old`, '', { qos: 1, retain: true });
  }, 60_000);

  it('waits on one topic share one subscription: each resumes with its own message', async () => {
    const broker = new URL(MQTT_URL);
    const proxy = await startTcpProxy(Number(broker.port || 1883), broker.hostname);
    open.push({ close: () => proxy.close() });
    const db = await database(`mqtt://127.0.0.1:${proxy.port}`);
    const topic = unique('shared');
    const own = await client(MQTT_URL);
    const ids: number[] = [];
    for (const order of [1, 2, 3, 4, 5]) {
      const id = await createTaskInstance(db);
      await openStores(db).taskInstances.deferTaskInstance(
        id,
        new TaskDeferred({ trigger: new MqttTrigger({ connection: 'test_mqtt', topic: `${topic}/#`, match: { order } }), method: 'resume' }),
      );
      ids.push(id);
    }
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('triggerer_id', 'is', null).execute()).length === 0, {
      what: 'the waits running',
    });
    // Published until the shared subscription is made (MQTT keeps no history for a new subscriber).
    let connections = 0;
    await waitFor(
      async () => {
        connections = Math.max(connections, proxy.openConnections);
        for (const order of [1, 2, 3, 4, 5]) await own.publishAsync(`${topic}/orders/${order}`, JSON.stringify({ order }), { qos: 1 });
        return (await Promise.all(ids.map((id) => taskInstance(db, id)))).every((ti) => ti.state === 'scheduled');
      },
      { what: 'the five tasks to resume', timeoutMs: 15_000, intervalMs: 200 },
    );
    for (const [index, id] of ids.entries())
      expect((await taskInstance(db, id)).next_event).toEqual({ topic: `${topic}/orders/${index + 1}`, message: { order: index + 1 } });
    // Five waits, one connection through the proxy (the most seen while they waited): the triggerer's shared subscription.
    expect(connections).toBe(1);
  }, 60_000);

  it('shared watchers: two DAGs with different filters are one row and one session, each DAG taking its own messages; a new triggerer reads on, none twice', async () => {
    const db = await database();
    const topic = unique('shared-watch');
    const own = await client(MQTT_URL);
    const message = (i: number) => own.publishAsync(`${topic}/x`, JSON.stringify({ kind: i % 2 === 0 ? 'paid' : 'refund', n: i }), { qos: 1 });
    const runsOf = async (dagId: string) => (await db.db.selectFrom('dag_run').select('run_id').where('dag_id', '=', dagId).execute()).length;
    await runSharedWatchers(db, {
      watcher: (kind) => new MqttTrigger({ connection: 'test_mqtt', topic: `${topic}/#`, keyField: 'n', match: { kind }, shared: true }),
      // Subscribed once message 0 made its run (published again below, its key makes no second).
      started: async () => {
        await message(0);
        return (await runsOf('paid')) === 1;
      },
      publish: async (from, to) => {
        for (let i = from; i < to; i++) await message(i);
      },
      whileRunning: async () => {
        expect(await countRows(db, 'trigger')).toBe(1);
      },
      startAgain: async () => {
        const again = await startTriggerer(db);
        open.push({ close: () => again.stop() });
      },
    });
  }, 120_000);

  it('a DAG scheduled on a topic: one run per matching message, across a broker restart, none twice', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'deferflow-mqtt-'));
    const server = await startMosquitto(dir);
    open.push({
      close: async () => {
        await server.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    });
    const db = await database(server.url);
    const topic = unique('watch');
    await processWatchingDags(db, [
      { dagId: 'readings', watch: new MqttTrigger({ connection: 'test_mqtt', topic: `${topic}/#`, keyField: 'n', match: { kind: 'order' } }) },
    ]);
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    const runs = () => countRows(db, 'dag_run');
    // The watcher's session exists once it has subscribed: a first message made a run.
    const own = await client(server.url);
    await waitFor(
      async () => {
        await own.publishAsync(`${topic}/x`, JSON.stringify({ kind: 'order', n: 0 }), { qos: 1 });
        return (await runs()) === 1;
      },
      { what: 'the watcher subscribed', timeoutMs: 30_000, intervalMs: 200 },
    );
    const add = async (from: number, to: number) => {
      for (let i = from; i < to; i++) await own.publishAsync(`${topic}/x`, JSON.stringify({ kind: i % 2 === 0 ? 'order' : 'refund', n: i }), { qos: 1 });
    };
    await add(1, 100);
    // Stopped and started again: the session and what it held wait on disk.
    await server.restart('SIGTERM');
    await add(100, 200);
    await waitFor(async () => (await runs()) === 100, { what: 'one run per order message (100)', timeoutMs: 90_000 });
    const runIds = (await db.db.selectFrom('dag_run').select('run_id').execute()).map((row) => row.run_id);
    expect(new Set(runIds).size).toBe(100);
    // Every order message once, by its key (the body's `n`); the message 0 published again (as a redelivery would) made no run.
    await own.publishAsync(`${topic}/x`, JSON.stringify({ kind: 'order', n: 0 }), { qos: 1 });
    await own.publishAsync(`${topic}/x`, JSON.stringify({ kind: 'order', n: 200 }), { qos: 1 });
    await waitFor(async () => (await runs()) === 101, { what: 'the run of message 200', timeoutMs: 30_000 });
    const first = await db.db.selectFrom('dag_run').select('conf').orderBy('logical_date').limit(1).executeTakeFirstOrThrow();
    expect(JSON.parse(first.conf).event.payload).toEqual({ topic: `${topic}/x`, message: { kind: 'order', n: 0 } });
  }, 300_000);
});
