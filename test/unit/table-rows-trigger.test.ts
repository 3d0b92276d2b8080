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
