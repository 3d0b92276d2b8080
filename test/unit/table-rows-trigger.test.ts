// TableRowsTrigger on both dialects, with a user's table in a database of its own reached by a
// named connection, on an in-process triggerer: a task waiting for the row about its own order,
// and a DAG scheduled on the table, one run per matching row, its cursor the last row read.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import { TableRowsTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';
import { processWatchingDags } from '../support/watching-dags.ts';
import { triggerRefusal } from '../support/trigger-refusal.ts';

afterAll(dropTestDatabases);

describe('TableRowsTrigger kwargs', () => {
  it('refuses names it would have to trust in SQL, naming the field', () => {
    const refused = (kwargs: unknown) => triggerRefusal(TableRowsTrigger, kwargs);
    expect(refused({ connection: 'shop', table: 'orders; drop table x', cursorColumn: 'id' })).toMatch(/table "orders; drop table x" is not a table name/);
    expect(refused({ connection: 'shop', table: 'orders', cursorColumn: 'id"' })).toMatch(/cursorColumn/);
    expect(refused({ connection: 'shop', table: 'orders', cursorColumn: 'id', columns: ['a b'] })).toMatch(/columns/);
    expect(refused({ connection: 'shop', table: 'orders', cursorColumn: 'id', pollInterval: 0 })).toMatch(/pollInterval/);
    expect(refused({ connection: 'shop', table: 'orders', cursorColumn: 'id', notify: 'orders added' })).toMatch(/notify "orders added" is not a channel name/);
  });
});

describe.each(testDialects)('TableRowsTrigger on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_SHOP;
  });
  /** deferflow's database, and the shop's (a database of its own, as a user's would be), with its orders table. */
  const databases = async () => {
    const db = await migratedDatabase(dialect);
    const shop = await migratedDatabase(dialect);
    open.push(db, shop);
    const id = dialect === 'postgres' ? sql.raw('id bigint generated always as identity primary key') : sql.raw('id integer primary key autoincrement');
    await sql`create table shop_orders (${id}, ref text not null, status text not null)`.execute(shop.db);
    process.env.DEFERFLOW_CONN_SHOP = shop.url;
    const triggerer = await startTriggerer(db);
    open.push({ close: () => triggerer.stop() });
    return { db, shop };
  };
  const insert = (shop: TestDatabase, rows: { ref: string; status: string }[]) =>
    sql`insert into shop_orders (ref, status) values ${sql.join(rows.map((row) => sql`(${row.ref}, ${row.status})`))}`.execute(shop.db);

  it('a task waits for the row about its own order', async () => {
    const { db, shop } = await databases();
    await insert(shop, [{ ref: 'A-1', status: 'paid' }]);
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({
        trigger: new TableRowsTrigger({ connection: 'shop', table: 'shop_orders', cursorColumn: 'id', match: { ref: 'A-7' }, pollInterval: 0.1 }),
        method: 'resume',
      }),
    );
    await insert(shop, [{ ref: 'A-2', status: 'paid' }]);
    await insert(shop, [{ ref: 'A-7', status: 'paid' }]);
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the task to resume', timeoutMs: 15_000 });
    expect((await taskInstance(db, id)).next_event).toEqual({
      table: 'shop_orders',
      row: { id: dialect === 'postgres' ? '3' : 3, ref: 'A-7', status: 'paid' },
    });
  });

  it('a DAG scheduled on a table: one run per matching row, the cursor at the last row read', async () => {
    const { db, shop } = await databases();
    await processWatchingDags(db, [
      {
        dagId: 'paid_orders',
        watch: new TableRowsTrigger({ connection: 'shop', table: 'shop_orders', cursorColumn: 'id', match: { status: 'paid' }, batch: 25, pollInterval: 0.1 }),
      },
    ]);
    const rows = Array.from({ length: 120 }, (_, i) => ({ ref: `B-${i}`, status: i % 2 === 0 ? 'paid' : 'open' }));
    await insert(shop, rows.slice(0, 70));
    await insert(shop, rows.slice(70));
    const runs = () => db.db.selectFrom('dag_run').select('run_id').orderBy('logical_date').execute();
    await waitFor(async () => (await runs()).length === 60, { what: 'one run per paid order', timeoutMs: 20_000 });
    await waitFor(async () => String(JSON.parse((await db.db.selectFrom('trigger').select('cursor').executeTakeFirstOrThrow()).cursor ?? 'null')) === '120', {
      what: 'the cursor at the last row',
    });
    expect((await runs()).slice(0, 3).map((run) => run.run_id)).toEqual(['event__shop_orders:1', 'event__shop_orders:3', 'event__shop_orders:5']);
  }, 60_000);
});

// What docs/events.md tells a user to run on their table: each insert statement notifies the channel.
const NOTIFY_ON_INSERT = (table: string, channel: string) => `
create or replace function ${table}_added() returns trigger language plpgsql as $$
begin
  perform pg_notify('${channel}', '');
  return null;
end $$;
create trigger ${table}_added after insert on ${table} for each statement execute function ${table}_added();
`;

describe.each(testDialects.filter((dialect) => dialect === 'postgres'))('TableRowsTrigger with notify on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
    delete process.env.DEFERFLOW_CONN_SHOP;
  });

  it('a NOTIFY on its channel wakes a wait at once, long before its next poll; one listening connection serves every wait on the channel', async () => {
    const db = await migratedDatabase(dialect);
    const shop = await migratedDatabase(dialect);
    open.push(db, shop);
    const channel = `orders_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    await sql`create table shop_orders (id bigint generated always as identity primary key, ref text not null)`.execute(shop.db);
    await sql.raw(NOTIFY_ON_INSERT('shop_orders', channel)).execute(shop.db);
    process.env.DEFERFLOW_CONN_SHOP = shop.url;
    const triggerer = await startTriggerer(db);
    open.push({ close: () => triggerer.stop() });
    const waits: number[] = [];
    for (const ref of ['N-1', 'N-2', 'N-3']) {
      const id = await createTaskInstance(db);
      await openStores(db).taskInstances.deferTaskInstance(
        id,
        new TaskDeferred({
          trigger: new TableRowsTrigger({ connection: 'shop', table: 'shop_orders', cursorColumn: 'id', match: { ref }, pollInterval: 300, notify: channel }),
          method: 'resume',
        }),
      );
      waits.push(id);
    }
    const listening = async () =>
      Number((await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where query = ${`LISTEN "${channel}"`}`.execute(shop.db)).rows[0]!.n);
    await waitFor(async () => (await listening()) === 1, { what: 'the channel listened to', timeoutMs: 15_000 });
    await waitFor(async () => (await db.db.selectFrom('trigger').select('id').where('triggerer_id', 'is', null).execute()).length === 0, {
      what: 'the waits running',
    });
    await sql`insert into shop_orders (ref) values ('N-2'), ('N-9')`.execute(shop.db);
    // Its poll is 300 s away: only the notification can wake it in time.
    await waitFor(async () => (await taskInstance(db, waits[1]!)).state === 'scheduled', { what: 'the wait on N-2 to resume', timeoutMs: 20_000 });
    expect((await taskInstance(db, waits[1]!)).next_event).toMatchObject({ table: 'shop_orders', row: { ref: 'N-2' } });
    await sql`insert into shop_orders (ref) values ('N-1')`.execute(shop.db);
    await waitFor(async () => (await taskInstance(db, waits[0]!)).state === 'scheduled', { what: 'the wait on N-1 to resume', timeoutMs: 20_000 });
    expect((await taskInstance(db, waits[2]!)).state).toBe('deferred');
    expect(await listening()).toBe(1);
  }, 60_000);
});
