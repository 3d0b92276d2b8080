/**
 * The pure-Node reference the triggerer benchmark runs beside deferflow (`npm run bench --
 * --baseline`): the same work, done as fast as plain Node and the database driver can, with
 * nothing of deferflow in it. What the ratio in the benchmark's JSON is measured against.
 *
 *   node --import tsx bench/baseline-triggerer.ts --db URL [--batch N]
 *
 * It reads every deferred task instance's trigger (the benchmark's DateTimeTriggers), runs one
 * pending async generator per trigger on this one event loop (each awaiting its own timer until
 * the trigger's moment, then yielding the event), and writes what fired in batches, each one
 * statement (`update task_instance … where trigger_id = any($1)`, on SQLite `in (select value
 * from json_each(?))` in a transaction of its own) moving the task instances to scheduled with
 * the event, as deferflow's write does. A batch is written as soon as --batch triggers have
 * fired, while the timers of the rest still fire; what is left, at the end of that turn of the
 * loop. On PostgreSQL the batches go out on --connections connections at once (one per core by
 * default), so the server updates on every core while Node fires.
 *
 * Measured on the 2-core machine, 100,000 due at once (due moment → last commit): on PostgreSQL,
 * one connection writing everything at the end of the turn 1.9–2.5 s; batches of 10,000 as they
 * fill on two connections 1.4 s (5,000: 1.6 s; 20,000: 1.6 s). Those are the defaults. On
 * SQLite, writing on a worker thread so the loop only fires measured no faster (850–933 ms,
 * against 849–1,065 ms on the loop): firing the generators is most of the time.
 *
 * It prints the lines the benchmark reads from the triggerer's log, in the same shape: one
 * `{"running": N, "time": …}` once all are loaded, one `{"kind": "event",
 * "moved_task_instances": n, "time": …}` per committed batch (its time taken as COMMIT returns).
 */
import os from 'node:os';
import Sqlite from 'better-sqlite3';
import pg from 'pg';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', demandOption: true, describe: 'sqlite:PATH or postgres://…' })
  .option('batch', { type: 'number', default: 10_000, describe: 'task instances per statement' })
  .option('connections', { type: 'number', default: os.availableParallelism(), describe: 'PostgreSQL connections writing at once' })
  .strict()
  .parse();

interface Store {
  /** [trigger id, moment in ms] of every trigger a deferred task instance waits on. */
  load(): Promise<[number, number][]>;
  /** Moves the task instances deferred on `triggerIds` to scheduled with `event`; resolves once committed, with how many moved. */
  move(triggerIds: number[], event: string, now: string): Promise<number>;
  close(): Promise<void>;
}

const LOAD_SQL = `select trigger.id, trigger.kwargs from trigger join task_instance on task_instance.trigger_id = trigger.id where task_instance.state = 'deferred'`;

function sqliteStore(file: string): Store {
  const db = new Sqlite(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  const update = db.prepare(
    `update task_instance set state = 'scheduled', next_event = ?, trigger_id = null, updated_at = ?
     where trigger_id in (select value from json_each(?)) and state = 'deferred'`,
  );
  const move = db.transaction((ids: number[], event: string, now: string) => update.run(event, now, JSON.stringify(ids)).changes);
  return {
    load: async () => (db.prepare(LOAD_SQL).raw().all() as [number, string][]).map(([id, kwargs]) => [id, momentOf(kwargs)]),
    move: async (ids, event, now) => move(ids, event, now),
    close: async () => {
      db.close();
    },
  };
}

async function postgresStore(url: string): Promise<Store> {
  // bigint ids as numbers, as deferflow reads them.
  pg.types.setTypeParser(pg.types.builtins.INT8, Number);
  const client = new pg.Pool({ connectionString: url, max: args.connections });
  return {
    load: async () => (await client.query<{ id: number; kwargs: unknown }>(LOAD_SQL)).rows.map((row) => [row.id, momentOf(row.kwargs)]),
    move: async (ids, event, now) => {
      const result = await client.query(
        `update task_instance set state = 'scheduled', next_event = $1::jsonb, trigger_id = null, updated_at = $2
         where trigger_id = any($3::bigint[]) and state = 'deferred'`,
        [event, now, ids],
      );
      return result.rowCount ?? 0;
    },
    close: () => client.end(),
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function momentOf(kwargs: unknown): number {
  const parsed = (typeof kwargs === 'string' ? JSON.parse(kwargs) : kwargs) as { moment: string };
  return Date.parse(parsed.moment);
}

/**
 * One trigger: waits for its moment on a timer of its own, then yields its event. One timer, set
 * once: waking early and finishing on a short timer (as a long wait should, Linux timers running
 * late by ~0.1% of their wait) costs every trigger a second timer and a second resumption, more
 * than the few ms a wait of this benchmark's length runs late. Nor do the triggers due at one
 * moment share one promise on one timer: measured, it is slower to the first commit (+1.1 s at
 * 100,000), since all the generators then resume together, hop by hop, before any one yields.
 */
async function* dateTimeTrigger(moment: number): AsyncGenerator<string> {
  await sleep(moment - Date.now());
  yield JSON.stringify({ moment: new Date(moment).toISOString() });
}

const store = args.db.startsWith('sqlite:') ? sqliteStore(args.db.slice('sqlite:'.length)) : await postgresStore(args.db);
/** Trigger ids fired and not yet handed to a write. */
let fired: number[] = [];
let firedEvent = '';
let flushQueued = false;
/** Writes handed to the store and not yet committed (pg queues them on its one connection; SQLite's run at once). */
let writes: Promise<unknown> = Promise.resolve();

/**
 * A full batch is written at once, while the timers of the rest still fire: on PostgreSQL the
 * server works on it meanwhile. What is left is written at the end of this turn of the loop.
 */
function enqueue(triggerId: number, event: string): void {
  fired.push(triggerId);
  firedEvent = event;
  if (fired.length >= args.batch) flush();
  else if (!flushQueued) {
    flushQueued = true;
    setImmediate(() => {
      flushQueued = false;
      flush();
    });
  }
}

function flush(): void {
  if (fired.length === 0) return;
  const batch = fired;
  fired = [];
  const begun = Date.now();
  const written = store.move(batch, firedEvent, new Date(begun).toISOString()).then((moved) => {
    process.stdout.write(`${JSON.stringify({ kind: 'event', moved_task_instances: moved, time: Date.now(), write_ms: Date.now() - begun })}\n`);
  });
  writes = Promise.all([writes, written]);
}

async function run(triggerId: number, moment: number): Promise<void> {
  for await (const event of dateTimeTrigger(moment)) {
    enqueue(triggerId, event);
    return;
  }
}

process.stdout.write(`${JSON.stringify({ idle_rss: process.memoryUsage.rss() })}\n`);
const triggers = await store.load();
for (const [id, moment] of triggers) void run(id, moment);
process.stdout.write(`${JSON.stringify({ running: triggers.length, time: Date.now() })}\n`);
process.once('SIGTERM', () => {
  void writes.then(() => store.close()).then(() => process.exit(0));
});
