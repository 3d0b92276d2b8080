import type { CronExpressionParser } from 'cron-parser';
import { lazyPackage } from '../vocabulary/lazy-package.ts';
import { DateTime, Duration, IANAZone } from 'luxon';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import { ago } from '../vocabulary/time/readable-duration.ts';

const cronParser = lazyPackage<{ CronExpressionParser: typeof CronExpressionParser }>('cron-parser');

/*
 * When a DAG runs by itself. As in Airflow, a scheduled run covers a data interval
 * [start, end): it is created once `end` has passed, its logical date is `start`, and the next
 * interval starts where it ended.
 *
 * - cron: the intervals lie between consecutive fire times of the expression, evaluated in the
 *   schedule's IANA time zone, by cron-parser, DST included: a daily 02:30 in Europe/Amsterdam
 *   fires once on each day, at 03:30 on the day the clock skips 02:00-03:00 and at the first
 *   02:30 on the day it repeats that hour. The first interval starts at the first fire time at
 *   or after the start date.
 * - interval: fixed-length intervals from the start date on.
 *
 * catchup false (the default) creates only the latest completed interval after a gap (a new DAG
 * with an old start date, a scheduler that was down); catchup true creates every missed one, in
 * order, at most MAX_RUNS_PER_CHECK per check, so a start date years back does not create
 * thousands of runs in one pass.
 */

export type Schedule = { readonly kind: 'cron'; readonly cron: string; readonly timezone: string } | { readonly kind: 'interval'; readonly intervalMs: number };

export interface ScheduleWindow {
  readonly schedule: Schedule;
  /** Epoch ms: no interval starts before it. */
  readonly startDate: number;
  /** Epoch ms or null: no interval starts after it. */
  readonly endDate: number | null;
  readonly catchup: boolean;
}

export interface DataInterval {
  readonly start: number;
  readonly end: number;
}

export const MAX_RUNS_PER_CHECK = 100;

/** Cron presets besides the five-field form (cron-parser's own presets use a seconds field). */
const PRESETS: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

/** Why `cron` is not a five-field cron expression or preset, or null when it is one. */
export function cronProblem(cron: string, timezone: string): string | null {
  const expression = PRESETS[cron] ?? cron;
  if (expression.trim().split(/\s+/).length !== 5)
    return `cron expression ${JSON.stringify(cron)} must have five fields (minute hour day month weekday) or be one of ${Object.keys(PRESETS).join(', ')}`;
  try {
    cronParser().CronExpressionParser.parse(expression, { tz: timezone, strict: false });
    return null;
  } catch (error) {
    return `cron expression ${JSON.stringify(cron)} is invalid: ${(error as Error).message}`;
  }
}

export function isTimeZone(zone: string): boolean {
  return IANAZone.isValidZone(zone);
}

/**
 * The data intervals due at `now` after the last scheduled run (its logical date, or null for
 * none yet), oldest first; [] when none is due.
 */
export function dueDataIntervals(window: ScheduleWindow, lastLogicalDate: number | null, now: number): DataInterval[] {
  const { schedule } = window;
  let start = lastLogicalDate === null ? firstStartAtOrAfter(schedule, window.startDate) : following(schedule, lastLogicalDate, window.startDate);
  if (!window.catchup) {
    const latest = latestCompletedStart(window, now);
    if (latest !== null && latest > start) start = latest;
  }
  const due: DataInterval[] = [];
  while (due.length < MAX_RUNS_PER_CHECK && (window.endDate === null || start <= window.endDate)) {
    const end = following(schedule, start, window.startDate);
    if (end > now) break;
    due.push({ start, end });
    start = end;
  }
  return due;
}

/** When the next interval after the last run (or the first one) ends: the next moment worth checking. */
export function nextDueAt(window: ScheduleWindow, lastLogicalDate: number | null): number | null {
  const start =
    lastLogicalDate === null ? firstStartAtOrAfter(window.schedule, window.startDate) : following(window.schedule, lastLogicalDate, window.startDate);
  if (window.endDate !== null && start > window.endDate) return null;
  return following(window.schedule, start, window.startDate);
}

/** The serialized form: { "cron", "timezone" } or { "interval_ms" }. */
export function scheduleToJson(schedule: Schedule): JsonObject {
  return schedule.kind === 'cron' ? { cron: schedule.cron, timezone: schedule.timezone } : { interval_ms: schedule.intervalMs };
}

/** A schedule as a serialized DAG stores it: scheduleToJson's forms, a signal key, or watchers. */
export interface StoredSchedule {
  readonly cron?: string;
  readonly timezone?: string;
  readonly interval_ms?: number;
  readonly signal?: string;
  readonly watch?: readonly { readonly classpath: string }[];
}

/**
 * A stored schedule as people read it (`dags list`, the status page): `0 2 * * * (Europe/Amsterdam)`,
 * `every 60 min`, `on signal orders.loaded`, `watch <classpath>, …`; null for none (triggered only).
 */
export function describeSchedule(schedule: StoredSchedule | null | undefined): string | null {
  if (!schedule) return null;
  if (typeof schedule.signal === 'string') return `on signal ${schedule.signal}`;
  if (Array.isArray(schedule.watch)) return `watch ${schedule.watch.map((watcher) => watcher.classpath).join(', ')}`;
  if (typeof schedule.cron === 'string') return `${schedule.cron} (${schedule.timezone})`;
  return typeof schedule.interval_ms === 'number' ? `every ${ago(schedule.interval_ms)}` : null;
}

/** The first interval start at or after `moment`. */
function firstStartAtOrAfter(schedule: Schedule, moment: number): number {
  return schedule.kind === 'interval' ? moment : nextFire(schedule, moment - 1);
}

/** The interval start after `start` (its interval's end). Interval schedules stay on the start date's grid. */
function following(schedule: Schedule, start: number, startDate: number): number {
  if (schedule.kind === 'cron') return nextFire(schedule, start);
  const steps = Math.floor((start - startDate) / schedule.intervalMs) + 1;
  return startDate + steps * schedule.intervalMs;
}

/** The start of the latest interval that has ended by `now`, or null when none has. */
function latestCompletedStart(window: ScheduleWindow, now: number): number | null {
  const { schedule, startDate } = window;
  if (schedule.kind === 'interval') {
    const ended = Math.floor((now - startDate) / schedule.intervalMs);
    return ended >= 1 ? startDate + (ended - 1) * schedule.intervalMs : null;
  }
  const end = previousFire(schedule, now + 1);
  if (end === null) return null;
  const start = previousFire(schedule, end);
  return start === null || start < startDate ? null : start;
}

function expression(schedule: Extract<Schedule, { kind: 'cron' }>, currentDate: number) {
  return cronParser().CronExpressionParser.parse(PRESETS[schedule.cron] ?? schedule.cron, { currentDate: new Date(currentDate), tz: schedule.timezone });
}

/** The first fire time strictly after `moment`. */
function nextFire(schedule: Extract<Schedule, { kind: 'cron' }>, moment: number): number {
  return expression(schedule, moment).next().getTime();
}

/** The last fire time strictly before `moment`, or null if the expression never fired before it. */
function previousFire(schedule: Extract<Schedule, { kind: 'cron' }>, moment: number): number | null {
  try {
    return expression(schedule, moment).prev().getTime();
  } catch {
    return null;
  }
}

/** An interval given as a luxon Duration or seconds, in ms; calendar units are refused (their length varies). */
export function fixedIntervalMs(value: Duration | number): number | null {
  if (typeof value === 'number') return Number.isFinite(value) && value > 0 ? value * 1000 : null;
  if (!Duration.isDuration(value) || !value.isValid) return null;
  if (value.years !== 0 || value.quarters !== 0 || value.months !== 0) return null;
  const ms = value.toMillis();
  return Number.isFinite(ms) && ms > 0 ? ms : null;
}

/** A moment given as a Date, an ISO string with an offset, or a luxon DateTime, in epoch ms; null if invalid. */
export function momentMs(value: unknown): number | null {
  if (value instanceof Date) return Number.isFinite(value.getTime()) ? value.getTime() : null;
  if (DateTime.isDateTime(value)) return value.isValid ? value.toMillis() : null;
  if (typeof value === 'string') {
    const parsed = DateTime.fromISO(value, { setZone: true });
    // A naive string names no single moment.
    if (!parsed.isValid || !/(Z|[+-]\d\d:?\d\d)$/.test(value)) return null;
    return parsed.toMillis();
  }
  return null;
}
