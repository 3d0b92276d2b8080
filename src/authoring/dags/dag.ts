import { InvalidDagError } from '../../vocabulary/errors.ts';
import type { AnyOperator, TaskDefaults } from '../operators/base-operator.ts';
import { DateTime, Duration } from 'luxon';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import type { DurationInput } from '../../vocabulary/time/duration.ts';
import { cronProblem, fixedIntervalMs, isTimeZone, momentMs, type Schedule, type ScheduleWindow } from '../../model/schedule.ts';
import type { SignalSchedule, WatchSchedule } from '../../model/scheduler-dag.ts';
import { checkQueue } from '../../model/queues.ts';
import { isTriggerClass, type BaseTrigger } from '../triggers/base-trigger.ts';
import { checkSignalKey } from '../../model/signal.ts';

/** What a DAG is made with: its id and, optionally, its schedule, defaults for its tasks and its description. */
export interface DagOptions {
  /** Letters, digits, `_`, `-` and `.`. */
  readonly dagId: string;
  /** What the DAG does, for people (the status page and `dags list` show it). */
  readonly description?: string;
  /** Settings every task takes unless it sets its own. */
  readonly defaultArgs?: TaskDefaults;
  /** Params every task sees (a task's own params are laid over them). */
  readonly params?: JsonObject;
  /** Labels to find the DAG by. */
  readonly tags?: readonly string[];
  /**
   * When it runs by itself: a five-field cron expression or preset (`@hourly`, `@daily`,
   * `@weekly`, `@monthly`, `@yearly`), a fixed interval (a luxon Duration or seconds), or a
   * signal key, `{ signal: 'orders.loaded' }`: one run per new version of the key (see
   * SignalSchedule), or watchers, `{ watch: [trigger, …], queue? }`: triggers the triggerer runs
   * for as long as the DAG is there, each event one run (see docs/events.md). Default none: runs
   * only when triggered. See src/model/schedule.ts for data intervals.
   */
  readonly schedule?: string | DurationInput | { readonly signal: string } | WatchScheduleOptions | null;
  /**
   * Needed with a cron or interval schedule: no interval starts before it (Date, ISO string with
   * offset, or luxon DateTime). With a signal schedule, optional: versions sent since then run.
   */
  readonly startDate?: Date | string | DateTime;
  /** No interval starts after it. Default none. */
  readonly endDate?: Date | string | DateTime | null;
  /** Create every interval missed since the start date (true) or only the latest (false, the default). */
  readonly catchup?: boolean;
  /** The IANA zone cron expressions are read in. Default: the startDate's zone if it is a luxon DateTime, else UTC. */
  readonly timezone?: string;
}

/** A DAG scheduled on watchers: each event one of them yields starts a run. */
export interface WatchScheduleOptions {
  /** The watcher triggers (one, or several: an event of any starts a run). */
  readonly watch: BaseTrigger | readonly BaseTrigger[];
  /** The queue the watchers run in: triggerers started with --queues naming it run them. @default 'default' */
  readonly queue?: string;
}

const DAG_ID = /^[A-Za-z0-9_.-]+$/;
// A registered symbol, not instanceof: a DAG file loaded as CommonJS (a .ts file outside a
// "type": "module" package) gets its own copy of deferflow's classes.
const DAG_BRAND = Symbol.for('deferflow.Dag');

/** Whether `value` is a Dag, from this copy of deferflow or another. */
export function isDag(value: unknown): value is Dag {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[DAG_BRAND] === true;
}

/**
 * A DAG: tasks and the order they run in. Tasks join with `dag.add(...)`; their order comes
 * from `a.before(b)` / `chain(...)`. Every task must belong to this DAG, and the graph must have
 * no cycle: `validate()` (called by the loader) refuses anything else, naming the task.
 */
export class Dag {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [DAG_BRAND] = true;
  /** The DAG's id: letters, digits, `_`, `-` or `.`. */
  readonly dagId: string;
  /** The options it was made with. */
  readonly options: DagOptions;
  readonly #tasks = new Map<string, AnyOperator>();

  constructor(options: DagOptions) {
    if (typeof options?.dagId !== 'string' || !DAG_ID.test(options.dagId)) {
      throw new InvalidDagError(`DAG id ${JSON.stringify(options?.dagId)} must be letters, digits, "_", "-" or "."`);
    }
    this.dagId = options.dagId;
    this.options = Object.freeze({ ...options });
    this.signalSchedule = signalScheduleOf(options);
    this.watchSchedule = watchScheduleOf(options);
    this.scheduleWindow = this.signalSchedule || this.watchSchedule ? null : scheduleWindowOf(options);
  }

  /** The watchers it is scheduled on, serialized and checked; null when it is not. */
  readonly watchSchedule: WatchSchedule | null;

  /** The schedule with its start and end, validated; null for a DAG that runs only when triggered (or on a signal). */
  readonly scheduleWindow: ScheduleWindow | null;
  /** The signal it is scheduled on, validated; null when it is not. */
  readonly signalSchedule: SignalSchedule | null;

  /** Adds tasks (operators made with a taskId); returns the DAG. */
  add(...tasks: AnyOperator[]): this {
    for (const task of tasks) {
      const taskId = task.taskId;
      if (task.dagId !== null && task.dagId !== this.dagId) {
        throw new InvalidDagError(`DAG ${this.dagId}: task ${taskId} already belongs to DAG ${task.dagId}`);
      }
      const existing = this.#tasks.get(taskId);
      if (existing && existing !== task) throw new InvalidDagError(`DAG ${this.dagId}: two tasks have the id ${taskId}`);
      task.dagId = this.dagId;
      this.#tasks.set(taskId, task);
    }
    return this;
  }

  /** Its tasks, in the order they were added. */
  get tasks(): readonly AnyOperator[] {
    return [...this.#tasks.values()];
  }

  /** The task with this id, if the DAG has one. */
  task(taskId: string): AnyOperator | undefined {
    return this.#tasks.get(taskId);
  }

  /** Refuses an upstream task that is not in this DAG, and any cycle (naming it: a -> b -> a). */
  validate(): void {
    const members = new Set(this.#tasks.values());
    for (const task of members) {
      for (const upstream of task.upstream) {
        if (!members.has(upstream)) {
          throw new InvalidDagError(
            `DAG ${this.dagId}: task ${task.taskId} waits for ${describeTask(upstream)}, which is not a task of this DAG (add it with dag.add)`,
          );
        }
      }
    }
    const visiting: string[] = [];
    const done = new Set<string>();
    const visit = (task: AnyOperator): void => {
      const at = visiting.indexOf(task.taskId);
      // The walk goes upstream; the cycle is named the way its tasks run (a.before(b): a -> b).
      if (at !== -1) throw new InvalidDagError(`DAG ${this.dagId} has a cycle: ${[...visiting.slice(at), task.taskId].reverse().join(' -> ')}`);
      if (done.has(task.taskId)) return;
      visiting.push(task.taskId);
      for (const upstream of [...task.upstream].sort((a, b) => (a.taskId < b.taskId ? -1 : 1))) visit(upstream);
      visiting.pop();
      done.add(task.taskId);
    };
    for (const task of [...this.#tasks.values()].sort((a, b) => (a.taskId < b.taskId ? -1 : 1))) visit(task);
  }
}

function signalScheduleOf(options: DagOptions): SignalSchedule | null {
  const schedule = options.schedule;
  if (schedule === null || typeof schedule !== 'object' || Duration.isDuration(schedule) || !('signal' in schedule)) return null;
  const bad = (field: string, why: string) => new InvalidDagError(`DAG ${options.dagId}: ${field} ${why}`);
  const extra = Object.keys(schedule).filter((key) => key !== 'signal');
  if (extra.length > 0) throw bad('schedule', `has ${extra.map((key) => JSON.stringify(key)).join(', ')}; a signal schedule is { signal: KEY } alone`);
  let key: string;
  try {
    key = checkSignalKey(schedule.signal);
  } catch (error) {
    throw bad('schedule.signal', (error as Error).message.replace(/^signal key /, ''));
  }
  const startDate = options.startDate === undefined ? null : momentMs(options.startDate);
  if (startDate === null && options.startDate !== undefined)
    throw bad('startDate', 'must be a valid Date, an ISO-8601 string with an offset or Z, or a luxon DateTime');
  for (const field of ['endDate', 'catchup', 'timezone'] as const) {
    if (options[field] !== undefined && options[field] !== null) throw bad(field, 'has no meaning with a signal schedule: every new version of the key runs');
  }
  return Object.freeze({ key, startDate });
}

function watchScheduleOf(options: DagOptions): WatchSchedule | null {
  const schedule = options.schedule;
  if (schedule === null || typeof schedule !== 'object' || Duration.isDuration(schedule) || !('watch' in schedule)) return null;
  const bad = (field: string, why: string) => new InvalidDagError(`DAG ${options.dagId}: ${field} ${why}`);
  const extra = Object.keys(schedule).filter((key) => key !== 'watch' && key !== 'queue');
  if (extra.length > 0) throw bad('schedule', `has ${extra.map((key) => JSON.stringify(key)).join(', ')}; a watch schedule is { watch, queue? }`);
  const given: readonly unknown[] = Array.isArray(schedule.watch) ? schedule.watch : [schedule.watch];
  if (given.length === 0) throw bad('schedule.watch', 'names no trigger; give one or more');
  const watchers = given.map((trigger, index) => {
    if (typeof trigger !== 'object' || trigger === null || !isTriggerClass(trigger.constructor))
      throw bad(`schedule.watch[${index}]`, 'is not a trigger (an instance of a BaseTrigger class)');
    const serialized = (trigger as BaseTrigger).serializeAsWatcher();
    const consumer = (trigger as BaseTrigger).watcherConsumer();
    return Object.freeze({
      classpath: serialized.classpath,
      kwargs: serialized.kwargs,
      ...(serialized.eventFilter === undefined ? {} : { eventFilter: serialized.eventFilter }),
      ...(consumer === undefined ? {} : { consumer }),
    });
  });
  for (const field of ['startDate', 'endDate', 'catchup', 'timezone'] as const) {
    if (options[field] !== undefined && options[field] !== null) throw bad(field, 'has no meaning with a watch schedule: every event runs');
  }
  let queue: string;
  try {
    queue = checkQueue(schedule.queue);
  } catch (error) {
    throw bad('schedule.queue', (error as Error).message.replace(/^queue /, ''));
  }
  return Object.freeze({ watchers: Object.freeze(watchers), queue });
}

function scheduleWindowOf(options: DagOptions): ScheduleWindow | null {
  const bad = (field: string, why: string) => new InvalidDagError(`DAG ${options.dagId}: ${field} ${why}`);
  if (options.schedule === undefined || options.schedule === null) return null;
  if (options.startDate === undefined) throw bad('startDate', 'is needed with a schedule (no interval starts before it)');
  const startDate = momentMs(options.startDate);
  if (startDate === null) throw bad('startDate', 'must be a valid Date, an ISO-8601 string with an offset or Z, or a luxon DateTime');
  const endDate = options.endDate === undefined || options.endDate === null ? null : momentMs(options.endDate);
  if (endDate === null && options.endDate !== undefined && options.endDate !== null)
    throw bad('endDate', 'must be a valid Date, an ISO-8601 string with an offset or Z, or a luxon DateTime');
  if (endDate !== null && endDate < startDate) throw bad('endDate', 'is before startDate');
  if (options.catchup !== undefined && typeof options.catchup !== 'boolean') throw bad('catchup', 'must be true or false');
  let schedule: Schedule;
  if (typeof options.schedule === 'string') {
    const timezone = options.timezone ?? (DateTime.isDateTime(options.startDate) ? options.startDate.zoneName : null) ?? 'UTC';
    if (!isTimeZone(timezone)) throw bad('timezone', `${JSON.stringify(timezone)} is not an IANA time zone (e.g. "Europe/Amsterdam")`);
    const problem = cronProblem(options.schedule, timezone);
    if (problem) throw bad('schedule', problem);
    schedule = { kind: 'cron', cron: options.schedule, timezone };
  } else {
    const intervalMs = fixedIntervalMs(options.schedule as DurationInput);
    if (intervalMs === null)
      throw bad('schedule', 'must be a cron expression, or a positive interval without calendar units (a luxon Duration in days or smaller, or seconds)');
    schedule = { kind: 'interval', intervalMs };
  }
  return Object.freeze({ schedule: Object.freeze(schedule), startDate, endDate, catchup: options.catchup ?? false });
}

function describeTask(task: AnyOperator): string {
  try {
    return task.taskId;
  } catch {
    return `a ${task.constructor.name} without a taskId`;
  }
}
