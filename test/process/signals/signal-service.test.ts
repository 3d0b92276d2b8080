// The notification service (AIP-35) on both dialects: versions per key, catch-up, listeners that
// restart, concurrent senders, pushes (in-process; LISTEN/NOTIFY on PostgreSQL, killed and
// recovered), retention, and refusals, from the public API and the CLI.
import pino from 'pino';
import { sql } from 'kysely';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openDatabase, sendSignal, type Database, type Signal } from '../../../src/index.ts';
import { SignalService } from '../../../src/internals.ts';
import { migrateToLatest } from '../../../src/database/migrate.ts';
import { openStores } from '../../../src/storage/index.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects, type TestDialect } from '../../support/databases.ts';
import { LogCapture, migratedDatabase, waitFor } from '../../support/fixtures.ts';
import { startTriggerer } from '../../support/in-process-triggerer.ts';
import { spawnDeferflow } from '../../support/processes.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('signals on %s', (dialect: TestDialect) => {
  const open: Database[] = [];
  const services: SignalService[] = [];
  afterEach(async () => {
    await Promise.all(services.splice(0).map((service) => service.close()));
    await Promise.all(open.splice(0).map((database) => database.close()));
  });

  async function database(url?: string): Promise<{ database: Database; url: string }> {
    const target = url ?? (await freshDatabaseUrl(dialect));
    const db = openDatabase(target);
    open.push(db);
    if (!url) await migrateToLatest(db);
    return { database: db, url: target };
  }

  function service(db: Database, options: Parameters<typeof SignalService.of>[2] = {}, logs = new LogCapture()) {
    const made = SignalService.of(db, pino({ level: 'info' }, logs), options);
    services.push(made);
    return made;
  }

  it('counts a version per key from 1, lists them oldest first after a version, and knows each key’s latest', async () => {
    const { database: db } = await database();
    const signals = service(db);
    expect(await signals.latestVersion('orders.loaded')).toBe(0);
    expect(await signals.send('orders.loaded', { rows: 10 })).toBe(1);
    expect(await signals.send('orders.loaded', { rows: 20 })).toBe(2);
    expect(await signals.send('dataset/sales:2026-11-23')).toBe(1);
    expect(await signals.send('orders.loaded', 'done')).toBe(3);
    expect(await signals.latestVersion('orders.loaded')).toBe(3);
    const listed = await signals.list('orders.loaded', { sinceVersion: 1 });
    expect(listed.map(({ version, value }) => ({ version, value }))).toEqual([
      { version: 2, value: { rows: 20 } },
      { version: 3, value: 'done' },
    ]);
    expect((await signals.list('dataset/sales:2026-11-23'))[0]).toMatchObject({ key: 'dataset/sales:2026-11-23', version: 1, value: null });
    expect(await signals.list('orders.loaded', { limit: 1 })).toHaveLength(1);
  });

  it('hands a listener what it missed, in order, then each new signal once; a listener restarted from its last version gets nothing twice', async () => {
    const { database: db } = await database();
    const signals = service(db, { pollIntervalMs: 50 });
    for (let i = 1; i <= 3; i++) await signals.send('k', i);
    const first: Signal[] = [];
    const subscription = await signals.listen('k', (signal) => void first.push(signal), { sinceVersion: 1 });
    await waitFor(() => first.length === 2, { what: 'the two missed' });
    await signals.send('k', 4);
    await waitFor(() => first.length === 3, { what: 'the new one' });
    expect(first.map((s) => [s.version, s.value])).toEqual([
      [2, 2],
      [3, 3],
      [4, 4],
    ]);
    subscription.close();
    const lastSeen = subscription.version;
    expect(lastSeen).toBe(4);
    // Away: three more are sent.
    for (let i = 5; i <= 7; i++) await signals.send('k', i);
    const second: number[] = [];
    const again = await signals.listen('k', (signal) => void second.push(signal.version), { sinceVersion: lastSeen });
    await waitFor(() => second.length === 3, { what: 'the three sent while away' });
    await signals.send('k', 8);
    await waitFor(() => second.length === 4, { what: 'the next' });
    // No version twice, none skipped, even with the listener slow (each awaited in turn).
    expect(second).toEqual([5, 6, 7, 8]);
    again.close();
    // Without sinceVersion a listener starts after the latest.
    const fresh: number[] = [];
    await signals.listen('k', (signal) => void fresh.push(signal.version));
    await signals.send('k', 9);
    await waitFor(() => fresh.length === 1, { what: 'only the new one' });
    expect(fresh).toEqual([9]);
  });

  it('gives concurrent senders on separate connections distinct, gapless versions; a listener sees every one in order', async () => {
    const { database: db, url } = await database();
    const listening = service(db, { pollIntervalMs: 50 });
    const seen: number[] = [];
    await listening.listen('race', (signal) => void seen.push(signal.version), { sinceVersion: 0 });
    const senders = await Promise.all([0, 1, 2].map(async () => (await database(url)).database));
    const versions = (await Promise.all(senders.map((sender) => Promise.all(Array.from({ length: 40 }, (_, i) => sendSignal(sender, 'race', i)))))).flat();
    expect([...versions].sort((a, b) => a - b)).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
    await waitFor(() => seen.length === 120, { what: 'all 120 heard' });
    expect(seen).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
  });

  it('wakes a listener at once on a send from this process, without waiting for its poll', async () => {
    const { database: db } = await database();
    const signals = service(db, { pollIntervalMs: 60_000, pushedPollIntervalMs: 60_000 });
    const heard: number[] = [];
    await signals.listen('now', (signal) => void heard.push(signal.version));
    await signals.send('now');
    // Far inside the 60 s poll: the in-process push did it.
    await waitFor(() => heard.length === 1, { what: 'the in-process push', timeoutMs: 5000 });
  });

  it('prunes signals older than an age, keeping each key’s latest, and versions keep rising after', async () => {
    const { database: db } = await database();
    const signals = service(db);
    for (let i = 0; i < 3; i++) await signals.send('old', i);
    await signals.send('other');
    const pruned = await openStores(db).signals.pruneSignals(Date.now() + 1000);
    expect(pruned).toBe(2);
    expect((await signals.list('old')).map((s) => s.version)).toEqual([3]);
    expect((await signals.list('other')).map((s) => s.version)).toEqual([1]);
    expect(await signals.send('old')).toBe(4);
  });

  it('a triggerer prunes signals past --signal-retention at its cleanup, keeping each key’s latest', async () => {
    const database = await migratedDatabase(dialect);
    open.push(database);
    const signals = service(database);
    for (let i = 0; i < 3; i++) await signals.send('pruned', i);
    const triggerer = await startTriggerer(database, { signalRetention: 0.001 }, { cleanupIntervalMs: 50 });
    try {
      await waitFor(async () => (await signals.list('pruned')).length === 1, { what: 'the old signals pruned' });
      expect((await signals.list('pruned')).map((s) => s.version)).toEqual([3]);
      expect(triggerer.logs.matching((line) => typeof line.pruned_signals === 'number').length).toBeGreaterThan(0);
    } finally {
      await triggerer.stop();
    }
  });

  it('refuses a bad key, a value that is not JSON and one too large, naming what is wrong', async () => {
    const { database: db } = await database();
    const signals = service(db);
    for (const key of ['', 'has space', '-leading', 'x'.repeat(201), 7]) {
      await expect(signals.send(key as string)).rejects.toMatchObject({ code: 'DF_INVALID_SIGNAL' });
    }
    await expect(signals.send('has space')).rejects.toThrow(/signal key "has space" is not a key: use 1 to 200 characters, letters, digits and/);
    await expect(signals.send('k', { when: new Date() } as never)).rejects.toMatchObject({ code: 'DF_NOT_JSON' });
    await expect(signals.send('k', 'x'.repeat(70_000))).rejects.toThrow(/signal k: the value is 70002 bytes of JSON; a signal carries at most 65536/);
    await expect(signals.listen('k', () => {}, { sinceVersion: -1 })).rejects.toThrow('sinceVersion -1 is not a signal version');
    expect(await signals.latestVersion('k')).toBe(0);
  });

  it('deferflow signal send and list, from a shell, with clear refusals', async () => {
    const { database: db, url } = await database();
    const signals = service(db, { pollIntervalMs: 100 });
    const heard: Signal[] = [];
    await signals.listen('deploys', (signal) => void heard.push(signal));
    const send = async (...args: string[]) => {
      const proc = spawnDeferflow(['signal', 'send', ...args, '--db', url]);
      return { exit: await proc.exit, out: proc.text.join('\n'), err: proc.stderr.join('\n') };
    };
    expect(await send('deploys', '{"version": "1.4.2"}')).toMatchObject({ exit: { code: 0 }, out: '1' });
    expect(await send('deploys', 'rolled back', '--text')).toMatchObject({ exit: { code: 0 }, out: '2' });
    // Another process sent them: found by LISTEN/NOTIFY on PostgreSQL, by polling on SQLite.
    await waitFor(() => heard.length === 2, { what: 'both heard in this process' });
    expect(heard.map((s) => s.value)).toEqual([{ version: '1.4.2' }, 'rolled back']);
    const notJson = await send('deploys', 'rolled back');
    expect(notJson.exit.code).toBe(2);
    expect(notJson.err).toContain('error [DF_NOT_JSON]: value: "rolled back" is not JSON; quote text as a JSON string');
    const badKey = await send('bad key', '1');
    expect(badKey.exit.code).toBe(2);
    expect(badKey.err).toContain('error [DF_INVALID_SIGNAL]: signal key "bad key" is not a key');

    const listed = spawnDeferflow(['signal', 'list', 'deploys', '--since', '1', '--json', '--db', url]);
    expect((await listed.exit).code).toBe(0);
    expect(JSON.parse(listed.text.join('\n'))).toEqual([{ key: 'deploys', version: 2, sent_at: expect.any(String), value: 'rolled back' }]);
    const table = spawnDeferflow(['signal', 'list', 'deploys', '--db', url]);
    expect((await table.exit).code).toBe(0);
    expect(table.text[0]).toMatch(/^VERSION +SENT AT +VALUE$/);
    expect(table.text.slice(1).map((line) => line.split(/ {2,}/)[0])).toEqual(['1', '2']);
    const badSince = spawnDeferflow(['signal', 'list', 'deploys', '--since', 'ten', '--db', url]);
    expect((await badSince.exit).code).toBe(2);
    expect(badSince.stderr.join('\n')).toContain('since: expected a positive integer, got "ten"');
  }, 60_000);

  it.runIf(dialect === 'postgres')(
    'hears sends from other connections by NOTIFY; a LISTEN session killed with pg_terminate_backend reconnects and nothing is missed',
    async () => {
      const { database: db, url } = await database();
      const logs = new LogCapture();
      const signals = service(db, { pollIntervalMs: 60_000, pushedPollIntervalMs: 60_000 }, logs);
      const { database: sender } = await database(url);
      const heard: number[] = [];
      await signals.listen('pushed', (signal) => void heard.push(signal.version), { sinceVersion: 0 });
      await waitFor(() => signals.pushWorks, { what: 'LISTEN in place and its probe heard' });
      // Another handle is another service: only NOTIFY can wake this one inside its 60 s poll.
      await sendSignal(sender, 'pushed', 1);
      await waitFor(() => heard.length === 1, { what: 'the pushed signal', timeoutMs: 5000 });

      const killed = await sql<{ killed: boolean }>`
        select pg_terminate_backend(pid) as killed from pg_stat_activity
        where application_name = ${`deferflow listen ${process.pid}`} and pid <> pg_backend_pid()`.execute(sender.db);
      expect(killed.rows.length).toBeGreaterThanOrEqual(1);
      // Sent while the session is down or coming back: read on reconnect, in order, once each.
      for (let i = 2; i <= 4; i++) await sendSignal(sender, 'pushed', i);
      await waitFor(() => heard.length === 4, { what: 'the signals sent during the outage', timeoutMs: 15_000 });
      expect(heard).toEqual([1, 2, 3, 4]);
      expect(logs.matching((line) => String(line.msg).includes('the LISTEN connection was lost')).length).toBeGreaterThanOrEqual(1);
      await waitFor(() => signals.pushWorks, { what: 'push working again' });
      await sendSignal(sender, 'pushed', 5);
      await waitFor(() => heard.length === 5, { what: 'pushed again', timeoutMs: 5000 });
    },
    60_000,
  );

  it.runIf(dialect === 'sqlite')('hears sends from other connections by watching the file for their commits, well inside its poll', async () => {
    const { database: listening, url } = await database();
    const { database: sending } = await database(url);
    const signals = service(listening, { pollIntervalMs: 60_000, pushedPollIntervalMs: 60_000 });
    const heard: unknown[] = [];
    await signals.listen('elsewhere', (signal) => void heard.push(signal.value));
    // Another handle is another service, as another process would be: its commit is all there is to see.
    await service(sending).send('elsewhere', { n: 1 });
    await waitFor(() => heard.length === 1, { what: 'the send from another connection', timeoutMs: 10_000 });
    await service(sending).send('elsewhere', { n: 2 });
    await waitFor(() => heard.length === 2, { what: 'the second send', timeoutMs: 10_000 });
    expect(heard).toEqual([{ n: 1 }, { n: 2 }]);
  });
});
