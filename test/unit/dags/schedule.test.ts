// Cron and interval schedules: the data intervals (pure), the DAG options refused with their
// field named, and the scheduler creating scheduled runs from serialized DAGs on both dialects.
import { DateTime, Duration } from 'luxon';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Dag, FunctionOperator } from '../../../src/index.ts';
import { serializedDagSource } from '../../../src/services/dags/dag-processor.ts';
import { describeSchedule, type StoredSchedule, dueDataIntervals, MAX_RUNS_PER_CHECK, nextDueAt, type ScheduleWindow } from '../../../src/model/schedule.ts';
import { serializeDag, SERIALIZED_DAG_VERSION } from '../../../src/authoring/dags/serialized-dag.ts';
import { Scheduler } from '../../../src/daemons/scheduler/scheduler.ts';
import { writeSerializedDag } from '../../../src/storage/serialized-dags.ts';
import { openStores } from '../../../src/storage/index.ts';
import { dropTestDatabases, testDialects } from '../../support/databases.ts';
import { LogCapture, migratedDatabase, type TestDatabase } from '../../support/fixtures.ts';

afterAll(dropTestDatabases);

const at = (iso: string) => Date.parse(iso);
const shown = (intervals: { start: number; end: number }[]) =>
  intervals.map(({ start, end }) => `${new Date(start).toISOString()} -> ${new Date(end).toISOString()}`);
const cron = (expression: string, timezone = 'UTC', more: Partial<ScheduleWindow> = {}): ScheduleWindow => ({
  schedule: { kind: 'cron', cron: expression, timezone },
  startDate: at('2026-01-01T00:00:00Z'),
  endDate: null,
  catchup: true,
  ...more,
});

describe('data intervals', () => {
  it('cron: runs cover the intervals between fire times and are due once their interval ended', () => {
    const daily = cron('0 6 * * *');
    expect(shown(dueDataIntervals(daily, null, at('2026-01-03T05:59:59Z')))).toEqual(['2026-01-01T06:00:00.000Z -> 2026-01-02T06:00:00.000Z']);
    expect(shown(dueDataIntervals(daily, null, at('2026-01-03T06:00:00Z')))).toEqual([
      '2026-01-01T06:00:00.000Z -> 2026-01-02T06:00:00.000Z',
      '2026-01-02T06:00:00.000Z -> 2026-01-03T06:00:00.000Z',
    ]);
    // After the run of Jan 2 the next interval starts where it ended.
    expect(shown(dueDataIntervals(daily, at('2026-01-02T06:00:00Z'), at('2026-01-04T07:00:00Z')))).toEqual([
      '2026-01-03T06:00:00.000Z -> 2026-01-04T06:00:00.000Z',
    ]);
    expect(dueDataIntervals(daily, at('2026-01-03T06:00:00Z'), at('2026-01-04T07:00:00Z'))).toEqual([]);
    expect(nextDueAt(daily, at('2026-01-03T06:00:00Z'))).toBe(at('2026-01-05T06:00:00Z'));
  });

  it('catchup false creates only the latest completed interval after a gap; true creates all, at most a bounded number per check', () => {
    expect(shown(dueDataIntervals(cron('@daily', 'UTC', { catchup: false }), null, at('2026-03-01T12:00:00Z')))).toEqual([
      '2026-02-28T00:00:00.000Z -> 2026-03-01T00:00:00.000Z',
    ]);
    expect(shown(dueDataIntervals(cron('@daily', 'UTC', { catchup: false }), at('2026-02-20T00:00:00Z'), at('2026-03-01T12:00:00Z')))).toEqual([
      '2026-02-28T00:00:00.000Z -> 2026-03-01T00:00:00.000Z',
    ]);
    const all = dueDataIntervals(cron('@hourly'), null, at('2026-03-01T12:00:00Z'));
    expect(all).toHaveLength(MAX_RUNS_PER_CHECK);
    expect(new Date(all[0]!.start).toISOString()).toBe('2026-01-01T00:00:00.000Z');
    // The next check goes on from the last one created.
    expect(new Date(dueDataIntervals(cron('@hourly'), all.at(-1)!.start, at('2026-03-01T12:00:00Z'))[0]!.start).toISOString()).toBe('2026-01-05T04:00:00.000Z');
  });

  it('cron in a time zone follows its clock across DST: one run a day, each interval as long as that day', () => {
    const amsterdam = (more: Partial<ScheduleWindow>) => cron('30 2 * * *', 'Europe/Amsterdam', more);
    // The clock skips 02:00-03:00 on 2026-03-29 and repeats it on 2026-10-25.
    expect(shown(dueDataIntervals(amsterdam({ startDate: at('2026-03-27T12:00:00Z') }), null, at('2026-03-31T00:00:00Z')))).toEqual([
      '2026-03-28T01:30:00.000Z -> 2026-03-29T01:30:00.000Z',
      '2026-03-29T01:30:00.000Z -> 2026-03-30T00:30:00.000Z',
    ]);
    const autumn = dueDataIntervals(amsterdam({ startDate: at('2026-10-24T00:00:00Z') }), null, at('2026-10-27T00:00:00Z'));
    expect(shown(autumn)).toEqual(['2026-10-24T00:30:00.000Z -> 2026-10-25T00:30:00.000Z', '2026-10-25T00:30:00.000Z -> 2026-10-26T01:30:00.000Z']);
    expect(autumn.map(({ start }) => DateTime.fromMillis(start, { zone: 'Europe/Amsterdam' }).toFormat('HH:mm'))).toEqual(['02:30', '02:30']);
    expect(autumn[1]!.end - autumn[1]!.start).toBe(25 * 3600_000);
  });

  it('interval: fixed steps from the start date; no interval starts after the end date', () => {
    const hourly: ScheduleWindow = {
      schedule: { kind: 'interval', intervalMs: 3600_000 },
      startDate: at('2026-01-01T00:15:00Z'),
      endDate: at('2026-01-01T02:15:00Z'),
      catchup: true,
    };
    expect(shown(dueDataIntervals(hourly, null, at('2026-01-01T10:00:00Z')))).toEqual([
      '2026-01-01T00:15:00.000Z -> 2026-01-01T01:15:00.000Z',
      '2026-01-01T01:15:00.000Z -> 2026-01-01T02:15:00.000Z',
      '2026-01-01T02:15:00.000Z -> 2026-01-01T03:15:00.000Z',
    ]);
    expect(nextDueAt(hourly, at('2026-01-01T02:15:00Z'))).toBeNull();
    expect(shown(dueDataIntervals({ ...hourly, endDate: null, catchup: false }, null, at('2026-01-01T10:00:00Z')))).toEqual([
      '2026-01-01T08:15:00.000Z -> 2026-01-01T09:15:00.000Z',
    ]);
  });
});

describe('schedule options of a Dag', () => {
  const make = (options: Record<string, unknown>) => () => new Dag({ dagId: 'd', ...options } as never);
  it('refuses what would not schedule, naming the DAG and the field', () => {
    expect(make({ schedule: '@daily' })).toThrow('DAG d: startDate is needed with a schedule');
    expect(make({ schedule: '61 * * * *', startDate: '2026-01-01T00:00:00Z' })).toThrow(/DAG d: schedule cron expression "61 \* \* \* \*" is invalid/);
    expect(make({ schedule: '* * *', startDate: '2026-01-01T00:00:00Z' })).toThrow(/must have five fields/);
    expect(make({ schedule: '@daily', startDate: '2026-01-01T00:00:00' })).toThrow(
      'DAG d: startDate must be a valid Date, an ISO-8601 string with an offset or Z',
    );
    expect(make({ schedule: '@daily', startDate: '2026-01-01T00:00:00Z', timezone: 'Mars/Olympus' })).toThrow(
      'DAG d: timezone "Mars/Olympus" is not an IANA time zone',
    );
    expect(make({ schedule: Duration.fromObject({ months: 1 }), startDate: '2026-01-01T00:00:00Z' })).toThrow(
      /DAG d: schedule must be a cron expression, or a positive interval without calendar units/,
    );
    expect(make({ schedule: 0, startDate: '2026-01-01T00:00:00Z' })).toThrow(/DAG d: schedule must be/);
    expect(make({ schedule: '@daily', startDate: '2026-01-02T00:00:00Z', endDate: '2026-01-01T00:00:00Z' })).toThrow('DAG d: endDate is before startDate');
  });

  it("reads a cron in the start date's zone unless a timezone is given", () => {
    const local = new Dag({ dagId: 'd', schedule: '0 9 * * *', startDate: DateTime.fromISO('2026-06-01T00:00:00', { zone: 'America/New_York' }) });
    expect(local.scheduleWindow?.schedule).toEqual({ kind: 'cron', cron: '0 9 * * *', timezone: 'America/New_York' });
    expect(new Dag({ dagId: 'd', schedule: 3600, startDate: new Date(0) }).scheduleWindow).toEqual({
      schedule: { kind: 'interval', intervalMs: 3600_000 },
      startDate: 0,
      endDate: null,
      catchup: false,
    });
  });
});

describe('a stored schedule as dags list and the status page say it', () => {
  it('reads the serialized forms of a cron, an interval, a signal and watchers, and none', () => {
    const stored = (dagId: string, schedule: string | Duration | undefined, timezone?: string) =>
      (
        serializeDag(
          new Dag({ dagId, schedule, timezone, startDate: '2026-01-01T00:00:00Z' }).add(new FunctionOperator({ taskId: 'work', fn: () => 'done' })),
          `/dags/${dagId}.ts`,
        ).data as { dag: { schedule: StoredSchedule | null } }
      ).dag.schedule;
    expect(describeSchedule(stored('nightly', '0 2 * * *', 'Europe/Amsterdam'))).toBe('0 2 * * * (Europe/Amsterdam)');
    expect(describeSchedule(stored('hourly', Duration.fromObject({ hours: 1 })))).toBe('every 60 min');
    expect(describeSchedule(stored('quick', Duration.fromObject({ seconds: 30 })))).toBe('every 30 s');
    expect(describeSchedule(stored('manual', undefined))).toBeNull();
    expect(describeSchedule({ signal: 'orders.loaded' })).toBe('on signal orders.loaded');
    expect(describeSchedule({ watch: [{ classpath: 'a.Lines' }, { classpath: 'b.Rows' }] })).toBe('watch a.Lines, b.Rows');
  });
});

describe.each(testDialects)('scheduled runs on %s', (dialect) => {
  const open: TestDatabase[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((db) => db.close()));
  });

  async function withDags(...dags: Dag[]) {
    const db = await migratedDatabase(dialect);
    open.push(db);
    const context = { db: db.db, adapter: db.adapter, keyring: db.keyring };
    for (const dag of dags) {
      const serialized = serializeDag(dag, `/dags/${dag.dagId}.ts`);
      await writeSerializedDag(
        context,
        { dagId: dag.dagId, fileloc: `/dags/${dag.dagId}.ts`, data: serialized.data, hash: serialized.hash, schemaVersion: SERIALIZED_DAG_VERSION },
        at('2026-01-01T00:00:00Z'),
      );
    }
    const logs = new LogCapture();
    const scheduler = () =>
      new Scheduler(
        db,
        { pollIntervalMs: 1000, heartbeatIntervalMs: 1000, zombieThresholdMs: 60_000, runsPerPass: 100, hostname: 'test' },
        serializedDagSource(db),
        pino(logs),
      );
    const runs = async () =>
      (
        await db.db
          .selectFrom('dag_run')
          .select(['dag_id', 'run_id', 'run_type', 'logical_date', 'data_interval_start', 'data_interval_end'])
          .orderBy('dag_id')
          .orderBy('logical_date')
          .execute()
      ).map((row) => ({
        dag: row.dag_id,
        runId: row.run_id,
        type: row.run_type,
        interval: `${new Date(row.data_interval_start!).toISOString()} -> ${new Date(row.data_interval_end!).toISOString()}`,
      }));
    return { db, scheduler, runs, logs };
  }
  const task = () => new FunctionOperator({ taskId: 'work', fn: () => 'done' });

  it('creates each due run once, with its data interval, however many schedulers pass; task instances with it', async () => {
    const { db, scheduler, runs } = await withDags(
      new Dag({ dagId: 'daily', schedule: '0 6 * * *', startDate: '2026-01-01T00:00:00Z', catchup: true }).add(task()),
      new Dag({ dagId: 'manual_only' }).add(task()),
    );
    const [one, two] = [scheduler(), scheduler()];
    await Promise.all([one.pass(at('2026-01-03T07:00:00Z')), two.pass(at('2026-01-03T07:00:00Z'))]);
    await one.pass(at('2026-01-03T08:00:00Z'));
    expect(await runs()).toEqual([
      { dag: 'daily', runId: 'scheduled__2026-01-01T06:00:00.000Z', type: 'scheduled', interval: '2026-01-01T06:00:00.000Z -> 2026-01-02T06:00:00.000Z' },
      { dag: 'daily', runId: 'scheduled__2026-01-02T06:00:00.000Z', type: 'scheduled', interval: '2026-01-02T06:00:00.000Z -> 2026-01-03T06:00:00.000Z' },
    ]);
    expect(await db.db.selectFrom('task_instance').select('run_id').where('dag_id', '=', 'daily').execute()).toHaveLength(2);

    // A restarted scheduler goes on from the database, not from memory.
    await scheduler().pass(at('2026-01-04T06:00:01Z'));
    expect((await runs()).map((run) => run.runId)).toEqual([
      'scheduled__2026-01-01T06:00:00.000Z',
      'scheduled__2026-01-02T06:00:00.000Z',
      'scheduled__2026-01-03T06:00:00.000Z',
    ]);
  });

  it('a paused DAG gets no scheduled run; unpaused, its latest interval is created (catchup off)', async () => {
    const { db, scheduler, runs } = await withDags(new Dag({ dagId: 'hourly', schedule: '@hourly', startDate: '2026-01-01T00:00:00Z' }).add(task()));
    const storage = openStores(db);
    expect(await storage.serializedDags.setDagPaused('hourly', true)).toBe(true);
    const one = scheduler();
    await one.pass(at('2026-01-01T05:30:00Z'));
    expect(await runs()).toEqual([]);
    expect(await storage.serializedDags.setDagPaused('hourly', false)).toBe(true);
    await one.pass(at('2026-01-01T05:31:00Z'));
    expect((await runs()).map((run) => run.runId)).toEqual(['scheduled__2026-01-01T04:00:00.000Z']);
  });

  it("one DAG's broken schedule JSON is logged and skipped; the others' runs are still created", async () => {
    const { db, scheduler, runs, logs } = await withDags(
      new Dag({ dagId: 'a_broken', schedule: '@hourly', startDate: '2026-01-01T00:00:00Z' }).add(task()),
      new Dag({ dagId: 'b_fine', schedule: 3600, startDate: '2026-01-01T00:00:00Z' }).add(task()),
    );
    const row = await db.db.selectFrom('serialized_dag').select('data').where('dag_id', '=', 'a_broken').executeTakeFirstOrThrow();
    const data = JSON.parse(row.data);
    data.dag.schedule = { cron: 'every hour', timezone: 'UTC' };
    await db.db
      .updateTable('serialized_dag')
      .set({ data: db.adapter.jsonParam(JSON.stringify(data)), hash: 'edited' })
      .where('dag_id', '=', 'a_broken')
      .execute();

    await scheduler().pass(at('2026-01-01T05:30:00Z'));
    expect(await runs()).toEqual([
      { dag: 'b_fine', runId: 'scheduled__2026-01-01T04:00:00.000Z', type: 'scheduled', interval: '2026-01-01T04:00:00.000Z -> 2026-01-01T05:00:00.000Z' },
    ]);
    expect(logs.matching((line) => line.dag_id === 'a_broken' && line.level === 50)[0]?.error).toContain(
      'dag.schedule.cron cron expression "every hour" must have five fields',
    );
  });
});
