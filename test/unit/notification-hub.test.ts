// The wake-ups of daemons sharing a SQLite file: NotificationHub watches the file for commits by
// other connections (SqliteCommitWatcher). The daemons and signal listeners built on it are
// tested through real processes in test/process/signals/push-wakeups.test.ts.
import { symlinkSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { sql } from 'kysely';
import pino from 'pino';
import { afterAll, expect, it } from 'vitest';
import { openDatabase } from '../../src/database/connect.ts';
import { migrateToLatest } from '../../src/database/migrate.ts';
import { NotificationHub, SIGNAL_CHANNEL, WAKE_CHANNEL } from '../../src/database/notification-hub.ts';
import { TaskDeferred, TaskInstanceStateError } from '../../src/index.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { openStores } from '../../src/storage/index.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, freshDatabaseUrl, freshPostgresDatabaseUrl } from '../support/databases.ts';
import { createTaskInstance, LogCapture, waitFor } from '../support/fixtures.ts';

afterAll(dropTestDatabases);

it("on a SQLite file, another connection's commit calls catchUp, the subscriber's own commits do not; --no-push watches nothing; a symbolic link is followed", async () => {
  const url = await freshDatabaseUrl('sqlite');
  // The subscriber opens the file through a link, as a deployment's configured path may be one.
  const link = path.join(path.dirname(url.slice('sqlite:'.length)), 'link.db');
  symlinkSync(url.slice('sqlite:'.length), link);
  const own = openDatabase(`sqlite:${link}`);
  const other = openDatabase(url);
  const quiet = openDatabase(url);
  try {
    await sql`create table scratch (x integer)`.execute(own.db);
    const logs = new LogCapture();
    let caughtUp = 0;
    const unsubscribe = NotificationHub.of(own, pino(logs)).subscribe(
      WAKE_CHANNEL,
      () => {},
      () => caughtUp++,
    );
    let quietCaughtUp = 0;
    const quietHub = NotificationHub.of(quiet, pino(logs));
    quietHub.disable();
    quietHub.subscribe(
      WAKE_CHANNEL,
      () => {},
      () => quietCaughtUp++,
    );

    for (let i = 0; i < 5; i++) await sql`insert into scratch (x) values (${i})`.execute(own.db);
    // Nothing to wait for: the watcher reads the counter 5 ms after a change, and must find it unmoved.
    await delay(300);
    expect(caughtUp).toBe(0);

    await sql`insert into scratch (x) values (100)`.execute(other.db);
    await waitFor(() => caughtUp === 1, { what: "the other connection's commit", timeoutMs: 10_000 });
    await sql`insert into scratch (x) values (101)`.execute(other.db);
    await waitFor(() => caughtUp === 2, { what: 'the next commit', timeoutMs: 10_000 });
    expect(quietCaughtUp).toBe(0);
    expect(logs.lines).toEqual([]);
    unsubscribe();
  } finally {
    await Promise.all([own.close(), other.close(), quiet.close()]);
  }
});

it("on PostgreSQL, a transaction's notifications arrive when it commits (sent with the COMMIT), payloads intact, none from one rolled back", async () => {
  // A database of its own: other test files' notifications on the server do not reach it.
  const database = openDatabase(await freshPostgresDatabaseUrl());
  try {
    const heard: string[] = [];
    const hub = NotificationHub.of(database, pino(new LogCapture()));
    const unsubscribe = hub.subscribe(SIGNAL_CHANNEL, (payload) => heard.push(payload));
    await waitFor(() => hub.pushWorks, { what: 'LISTEN connected and its probe heard', timeoutMs: 10_000 });
    // Quotes and backslashes, as a signal key may hold: the driver writes them into SQL itself.
    const tricky = `7 it's a \\ key, "quoted"; commit; --`;
    await database.db.transaction().execute(async (trx) => {
      await database.adapter.notify(trx, SIGNAL_CHANNEL, tricky);
      await database.adapter.notify(trx, SIGNAL_CHANNEL, 'second');
      // Sent from another connection meanwhile and heard, while this transaction's are not yet.
      await database.adapter.notify(database.db, SIGNAL_CHANNEL, 'from another connection');
      await waitFor(() => heard.includes('from another connection'), { what: 'the other connection’s notification', timeoutMs: 10_000 });
      expect(heard).toEqual(['from another connection']);
    });
    await expect(
      database.db.transaction().execute(async (trx) => {
        await database.adapter.notify(trx, SIGNAL_CHANNEL, 'rolled back');
        throw new TypeError('the transaction fails');
      }),
    ).rejects.toThrow('the transaction fails');
    // In a transaction, likely on the pooled connection the rolled-back one had: nothing of it is left to send.
    await database.db.transaction().execute((trx) => database.adapter.notify(trx, SIGNAL_CHANNEL, 'last'));
    // Notifications arrive in commit order: once the last is heard, a rolled-back one would have been too.
    await waitFor(() => heard.includes('last'), { what: 'the last notification', timeoutMs: 10_000 });
    expect(heard).toEqual(['from another connection', tricky, 'second', 'last']);
    unsubscribe();
  } finally {
    await database.close();
  }
});

it('on PostgreSQL, a deferral wakes the triggerers, a finished task the schedulers, a scheduled task instance the workers, each in its own statement; a write that changed nothing wakes no one', async () => {
  const database = openDatabase(await freshPostgresDatabaseUrl());
  await migrateToLatest(database);
  try {
    const heard: string[] = [];
    const hub = NotificationHub.of(database, pino(new LogCapture()));
    const unsubscribe = hub.subscribe(WAKE_CHANNEL, (payload) => heard.push(payload));
    await waitFor(() => hub.pushWorks, { what: 'LISTEN connected and its probe heard', timeoutMs: 10_000 });
    const storage = openStores(database);
    const worker = { jobId: await storage.jobs.registerJob({ jobType: 'WorkerJob', hostname: 'h', pid: 1, capacity: 2 }), hostname: 'h', pid: 1 };
    const id = await createTaskInstance(database, { state: 'scheduled' });
    await storage.taskInstances.claimTaskInstances(worker, 1);
    const { tryNumber } = (await storage.taskInstances.startTaskInstance(id, worker.jobId, null))!;
    const markHeard = async (mark: string) => {
      await database.adapter.notify(database.db, WAKE_CHANNEL, mark);
      await waitFor(() => heard.includes(mark), { what: mark, timeoutMs: 10_000 });
    };
    await markHeard('before');

    // Another worker's outcome for it is dropped: nothing changed, so nothing is pushed.
    expect(await storage.taskInstances.finishTaskInstance(id, { workerJobId: worker.jobId + 1, tryNumber }, { state: 'success', returnValueJson: null })).toBe(
      false,
    );
    // Notifications arrive in commit order: a push from the dropped finish would come before the mark.
    await markHeard('after the dropped finish');
    expect(heard.slice(heard.indexOf('before') + 1)).toEqual(['after the dropped finish']);

    expect(await storage.taskInstances.finishTaskInstance(id, { workerJobId: worker.jobId, tryNumber }, { state: 'success', returnValueJson: null })).toBe(
      true,
    );
    await markHeard('after the finish');
    expect(heard.slice(heard.indexOf('after the dropped finish') + 1)).toEqual(['scheduler', 'after the finish']);

    const waiting = await createTaskInstance(database, { state: 'running' });
    await storage.taskInstances.deferTaskInstance(waiting, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }));
    // The finished one may not defer: refused, no trigger row, no push.
    await expect(storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }))).rejects.toThrow(
      TaskInstanceStateError,
    );
    await markHeard('after the deferrals');
    expect(heard.slice(heard.indexOf('after the finish') + 1)).toEqual(['triggerer', 'after the deferrals']);
    expect(await database.db.selectFrom('trigger').select('id').execute()).toHaveLength(1);

    // The scheduler's decisions: scheduled ones wake the workers, ending ones no one; so do
    // retries come due, and none come due wake no one.
    const [undecided, doomed] = [await createTaskInstance(database), await createTaskInstance(database)];
    await database.db.updateTable('task_instance').set({ state: null }).where('id', 'in', [undecided, doomed]).execute();
    expect(await storage.dagRuns.decideTaskInstances([doomed], 'upstream_failed')).toEqual([doomed]);
    expect(await storage.dagRuns.decideTaskInstances([undecided], 'scheduled')).toEqual([undecided]);
    expect(await storage.dagRuns.decideTaskInstances([undecided], 'scheduled')).toEqual([]);
    expect(await storage.taskInstances.scheduleReadyTaskInstances()).toBe(0);
    const retry = await createTaskInstance(database, { state: 'up_for_retry' });
    await database.db
      .updateTable('task_instance')
      .set({ ready_at: toDbTime(Date.now() - 1000) })
      .where('id', '=', retry)
      .execute();
    expect(await storage.taskInstances.scheduleReadyTaskInstances()).toBe(1);
    await markHeard('after the decisions');
    expect(heard.slice(heard.indexOf('after the deferrals') + 1)).toEqual(['worker', 'worker', 'after the decisions']);
    unsubscribe();
  } finally {
    await database.close();
  }
});

it("on PostgreSQL, deployments in two schemas of one database hear their own wake-ups and signals, not each other's", async () => {
  // Two schemas of the shared test database: NOTIFY's channels are the database's, not a schema's.
  const [first, second] = [openDatabase(await freshDatabaseUrl('postgres')), openDatabase(await freshDatabaseUrl('postgres'))];
  try {
    const heard = { first: [] as string[], second: [] as string[] };
    const hubs = { first: NotificationHub.of(first, pino(new LogCapture())), second: NotificationHub.of(second, pino(new LogCapture())) };
    const unsubscribe = [
      hubs.first.subscribe(WAKE_CHANNEL, (payload) => heard.first.push(payload)),
      hubs.first.subscribe(SIGNAL_CHANNEL, (payload) => heard.first.push(payload)),
      hubs.second.subscribe(WAKE_CHANNEL, (payload) => heard.second.push(payload)),
      hubs.second.subscribe(SIGNAL_CHANNEL, (payload) => heard.second.push(payload)),
    ];
    await waitFor(() => hubs.first.pushWorks && hubs.second.pushWorks, { what: 'both LISTEN sessions connected and their probes heard', timeoutMs: 10_000 });
    await first.adapter.notify(first.db, WAKE_CHANNEL, 'worker (first)');
    await first.db.transaction().execute((trx) => first.adapter.notify(trx, SIGNAL_CHANNEL, '1 key (first)'));
    await second.adapter.notify(second.db, WAKE_CHANNEL, 'triggerer (second)');
    await sql`select ${second.adapter.notifyExpression(WAKE_CHANNEL, 'scheduler (second)')}`.execute(second.db);
    await first.adapter.notify(first.db, WAKE_CHANNEL, 'last (first)');
    // A session hears notifications in commit order: once each has heard its own last, the other's would have come before.
    await waitFor(() => heard.second.includes('scheduler (second)') && heard.first.includes('last (first)'), {
      what: 'each deployment its own notifications',
      timeoutMs: 10_000,
    });
    expect(heard.first.filter((payload) => !payload.startsWith('probe '))).toEqual(['worker (first)', '1 key (first)', 'last (first)']);
    expect(heard.second.filter((payload) => !payload.startsWith('probe '))).toEqual(['triggerer (second)', 'scheduler (second)']);
    for (const stop of unsubscribe) stop();
  } finally {
    await first.close();
    await second.close();
  }
});
