// biome-ignore-all lint/suspicious/noExplicitAny: toSchedulerDag reads stored JSON of unknown shape field by field, checking each as it goes
import { InvalidDagError, InvalidSerializedDagError } from '../../vocabulary/errors.ts';
import type { SchedulerDag, SchedulerTask, SignalSchedule, WatchSchedule } from '../../model/scheduler-dag.ts';
import { TRIGGER_RULES } from '../../model/trigger-rules.ts';
import { START_CONDITIONS, STOP_END_STATES, type SignalAction } from '../../model/signal-actions.ts';
import { assertJsonObject, canonicalJson, sha256Hex, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { durationToMs } from '../../vocabulary/time/duration.ts';
import { cronProblem, isTimeZone, scheduleToJson, type Schedule, type ScheduleWindow } from '../../model/schedule.ts';
import type { Dag } from './dag.ts';
import { taskSettings } from './task-settings.ts';
import { checkQueue, DEFAULT_QUEUE } from '../../model/queues.ts';

/** The version of the JSON below; a reader refuses any other. */
export const SERIALIZED_DAG_VERSION = 1;

/*
 * A DAG as JSON (the AIP-24 design): everything the scheduler and the CLI need, and no code.
 * Task settings are stored resolved (task option, else default arg, else built-in default).
 *
 *   { "__version": 1,
 *     "dag": { "dag_id", "fileloc", "description", "tags", "params",
 *              "schedule": null | { "cron", "timezone" } | { "interval_ms" } | { "signal" }
 *                          | { "watch": [ { "classpath", "kwargs" } ], "queue" (absent for default) },
 *              "start_date", "end_date" (ISO-8601 or null), "catchup",
 *              "tasks": [ { "task_id", "operator", "upstream_task_ids" (sorted), "trigger_rule",
 *                           "retries", "retry_delay_ms", "retry_exponential_backoff",
 *                           "max_retry_delay_ms", "execution_timeout_ms", "priority_weight",
 *                           "params", "start_trigger": null | { "classpath", "kwargs",
 *                           "method", "next_kwargs", "timeout_ms" },
 *                           "signals" (absent when none): [ { "key", "action",
 *                           "condition" (start), "end_state" (stop) } ],
 *                           "queue" (absent for `default`) } ] } }
 *
 * A function among params is stored as { "__callable": "<its name>" }; other non-JSON values
 * are refused, naming the DAG, task and field.
 */
export interface SerializedDag {
  readonly data: JsonObject;
  /** sha256 of the canonical JSON: rows are rewritten only when it changes. */
  readonly hash: string;
}

export function serializeDag(dag: Dag, fileloc: string): SerializedDag {
  dag.validate();
  const window = dag.scheduleWindow;
  const tasks = [...dag.tasks]
    .sort((a, b) => (a.taskId < b.taskId ? -1 : 1))
    .map((task) => {
      const settings = taskSettings(dag, task);
      const where = `DAG ${dag.dagId}, task ${task.taskId}`;
      const start = task.taskOptions.startTrigger;
      let startTrigger: JsonValue = null;
      if (start) {
        const serialized = start.trigger.serializeAsStartTrigger();
        startTrigger = {
          classpath: serialized.classpath,
          kwargs: jsonOf(serialized.kwargs, `${where}: startTrigger kwargs`),
          method: start.method,
          next_kwargs: jsonOf(start.kwargs ?? {}, `${where}: startTrigger.kwargs`),
          timeout_ms: start.timeout === undefined || start.timeout === null ? null : durationToMs(start.timeout, `${where}: startTrigger.timeout`),
        };
      }
      return {
        task_id: task.taskId,
        operator: task.constructor.name,
        upstream_task_ids: [...task.upstream].map((upstream) => upstream.taskId).sort(),
        trigger_rule: settings.triggerRule,
        retries: settings.retry.retries,
        retry_delay_ms: settings.retry.retryDelayMs,
        retry_exponential_backoff: settings.retry.exponentialBackoff,
        max_retry_delay_ms: settings.retry.maxRetryDelayMs,
        execution_timeout_ms: settings.executionTimeoutMs,
        priority_weight: settings.priorityWeight,
        params: jsonOf(task.taskOptions.params ?? {}, `${where}: params`),
        start_trigger: startTrigger,
        // Absent when none, so DAGs without signal actions keep their hash.
        ...(settings.signalActions.length === 0 ? {} : { signals: settings.signalActions.map(signalActionJson) }),
        // Absent for `default`, so DAGs that name no queue keep their hash.
        ...(settings.queue === DEFAULT_QUEUE ? {} : { queue: settings.queue }),
      };
    });
  const data: JsonObject = {
    __version: SERIALIZED_DAG_VERSION,
    dag: {
      dag_id: dag.dagId,
      fileloc,
      description: dag.options.description ?? null,
      tags: [...(dag.options.tags ?? [])],
      params: jsonOf(dag.options.params ?? {}, `DAG ${dag.dagId}: params`),
      schedule: dag.signalSchedule
        ? { signal: dag.signalSchedule.key }
        : dag.watchSchedule
          ? {
              watch: dag.watchSchedule.watchers.map((watcher) => ({
                classpath: watcher.classpath,
                kwargs: jsonOf(watcher.kwargs, `DAG ${dag.dagId}: schedule.watch kwargs`),
                ...(watcher.eventFilter === undefined ? {} : { event_filter: watcher.eventFilter }),
              })),
              ...(dag.watchSchedule.queue === DEFAULT_QUEUE ? {} : { queue: dag.watchSchedule.queue }),
            }
          : window
            ? scheduleToJson(window.schedule)
            : null,
      start_date: window
        ? new Date(window.startDate).toISOString()
        : dag.signalSchedule?.startDate != null
          ? new Date(dag.signalSchedule.startDate).toISOString()
          : null,
      end_date: window?.endDate != null ? new Date(window.endDate).toISOString() : null,
      catchup: window?.catchup ?? false,
      tasks,
    },
  };
  return { data, hash: sha256Hex(canonicalJson(data)) };
}

function signalActionJson(action: SignalAction): JsonObject {
  if (action.action === 'start') return { key: action.key, action: action.action, condition: action.condition };
  if (action.action === 'stop') return { key: action.key, action: action.action, end_state: action.endState };
  return { key: action.key, action: action.action };
}

/** A stored task's `signals`, checked; absent: none. */
function readSignalActions(signals: any, at: string, bad: (field: string, why: string) => Error): readonly SignalAction[] {
  if (signals === undefined) return Object.freeze([]);
  if (!Array.isArray(signals)) throw bad(`${at}.signals`, 'is not a list');
  return Object.freeze(
    signals.map((entry: any, index: number): SignalAction => {
      const where = `${at}.signals[${index}]`;
      if (typeof entry?.key !== 'string' || entry.key === '') throw bad(`${where}.key`, 'is not a signal key');
      if (entry.action === 'restart') return Object.freeze({ key: entry.key, action: 'restart' });
      if (entry.action === 'start' && (START_CONDITIONS as readonly unknown[]).includes(entry.condition))
        return Object.freeze({ key: entry.key, action: 'start', condition: entry.condition });
      if (entry.action === 'stop' && (STOP_END_STATES as readonly unknown[]).includes(entry.end_state))
        return Object.freeze({ key: entry.key, action: 'stop', endState: entry.end_state });
      throw bad(where, 'is not { key, action: restart } or { key, action: start, condition } or { key, action: stop, end_state }');
    }),
  );
}

/** Functions become { "__callable": name }; anything else must already be JSON. */
function jsonOf(value: object, where: string): JsonObject {
  const replaced = replaceCallables(value);
  try {
    assertJsonObject(replaced, where);
  } catch (error) {
    throw new InvalidDagError((error as Error).message);
  }
  return replaced;
}

function replaceCallables(value: unknown): any {
  if (typeof value === 'function') return { __callable: value.name || '(anonymous)' };
  if (Array.isArray(value)) return value.map(replaceCallables);
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, replaceCallables(item)]));
  }
  return value;
}

/** Reads a stored serialized DAG for the scheduler, checking its version and shape. */
export function toSchedulerDag(dagId: string, dataText: string, hash: string): SchedulerDag {
  const bad = (field: string, why: string) => new InvalidSerializedDagError(dagId, field, why);
  let data: any;
  try {
    data = JSON.parse(dataText);
  } catch {
    throw bad('data', 'is not JSON');
  }
  if (data?.__version !== SERIALIZED_DAG_VERSION)
    throw bad('__version', `is ${JSON.stringify(data?.__version)}; this deferflow reads version ${SERIALIZED_DAG_VERSION}`);
  const dag = data.dag;
  if (dag?.dag_id !== dagId) throw bad('dag.dag_id', `is ${JSON.stringify(dag?.dag_id)}`);
  if (!Array.isArray(dag.tasks)) throw bad('dag.tasks', 'is not a list');
  const ids = new Set<string>(dag.tasks.map((task: any) => task?.task_id));
  const tasks: SchedulerTask[] = dag.tasks.map((task: any, index: number): SchedulerTask => {
    const at = `dag.tasks[${index}]`;
    const text = (field: string) => {
      if (typeof task?.[field] !== 'string' || task[field] === '') throw bad(`${at}.${field}`, 'is not a non-empty string');
      return task[field] as string;
    };
    const flag = (field: string) => {
      if (typeof task?.[field] !== 'boolean') throw bad(`${at}.${field}`, 'is not true or false');
      return task[field] as boolean;
    };
    const whole = (field: string, min: number) => {
      if (!Number.isInteger(task?.[field]) || task[field] < min) throw bad(`${at}.${field}`, `is not a whole number >= ${min}`);
      return task[field] as number;
    };
    const upstream = task.upstream_task_ids;
    if (!Array.isArray(upstream) || !upstream.every((id: unknown) => typeof id === 'string' && ids.has(id)))
      throw bad(`${at}.upstream_task_ids`, 'names a task the DAG does not have');
    if (!TRIGGER_RULES.includes(task.trigger_rule)) throw bad(`${at}.trigger_rule`, `is not one of ${TRIGGER_RULES.join(', ')}`);
    const start = task.start_trigger;
    if (
      start !== null &&
      (typeof start?.classpath !== 'string' || typeof start.method !== 'string' || typeof start.kwargs !== 'object' || typeof start.next_kwargs !== 'object')
    ) {
      throw bad(`${at}.start_trigger`, 'is neither null nor { classpath, kwargs, method, next_kwargs, timeout_ms }');
    }
    return Object.freeze({
      taskId: text('task_id'),
      operator: text('operator'),
      upstreamTaskIds: Object.freeze([...upstream]),
      triggerRule: task.trigger_rule,
      retry: Object.freeze({
        retries: whole('retries', 0),
        retryDelayMs: whole('retry_delay_ms', 0),
        exponentialBackoff: flag('retry_exponential_backoff'),
        maxRetryDelayMs: task.max_retry_delay_ms === null ? null : whole('max_retry_delay_ms', 0),
      }),
      priorityWeight: whole('priority_weight', Number.MIN_SAFE_INTEGER),
      startTrigger:
        start === null
          ? null
          : Object.freeze({
              classpath: start.classpath,
              kwargs: start.kwargs,
              method: start.method,
              nextKwargs: start.next_kwargs,
              timeoutMs: start.timeout_ms ?? null,
            }),
      signalActions: readSignalActions(task.signals, at, bad),
      queue: readQueue(task.queue, at, bad),
    });
  });
  const signalSchedule = readSignalSchedule(dag, bad);
  const watchSchedule = readWatchSchedule(dag, bad);
  return Object.freeze({
    dagId,
    hash,
    tasks: Object.freeze(tasks),
    schedule: signalSchedule || watchSchedule ? null : readScheduleWindow(dag, bad),
    signalSchedule,
    watchSchedule,
  });
}

/** A stored task's `queue`, checked; absent: `default`. */
function readQueue(queue: unknown, at: string, bad: (field: string, why: string) => Error): string {
  if (queue === undefined) return DEFAULT_QUEUE;
  try {
    return checkQueue(queue);
  } catch (error) {
    throw bad(`${at}.queue`, (error as Error).message);
  }
}

/** A watch schedule of a stored DAG, checked; null for any other schedule. */
function readWatchSchedule(dag: any, bad: (field: string, why: string) => Error): WatchSchedule | null {
  const schedule = dag.schedule;
  if (schedule === null || typeof schedule !== 'object' || !('watch' in schedule)) return null;
  if (!Array.isArray(schedule.watch) || schedule.watch.length === 0) throw bad('dag.schedule.watch', 'is not a list of triggers');
  const watchers = schedule.watch.map((watcher: any, index: number) => {
    if (typeof watcher?.classpath !== 'string' || typeof watcher.kwargs !== 'object' || watcher.kwargs === null || Array.isArray(watcher.kwargs))
      throw bad(`dag.schedule.watch[${index}]`, 'is not { classpath, kwargs }');
    return Object.freeze({
      classpath: watcher.classpath as string,
      kwargs: watcher.kwargs as JsonObject,
      ...(watcher.event_filter === undefined ? {} : { eventFilter: watcher.event_filter as JsonValue }),
    });
  });
  let queue: string;
  try {
    queue = checkQueue(schedule.queue);
  } catch (error) {
    throw bad('dag.schedule.queue', (error as Error).message);
  }
  return Object.freeze({ watchers: Object.freeze(watchers), queue });
}

/** A signal schedule of a stored DAG, checked; null for any other schedule. */
function readSignalSchedule(dag: any, bad: (field: string, why: string) => Error): SignalSchedule | null {
  const schedule = dag.schedule;
  if (schedule === null || typeof schedule !== 'object' || !('signal' in schedule)) return null;
  if (typeof schedule.signal !== 'string' || schedule.signal === '') throw bad('dag.schedule.signal', 'is not a signal key');
  const startDate = dag.start_date === null || dag.start_date === undefined ? null : Date.parse(dag.start_date);
  if (startDate !== null && !Number.isFinite(startDate)) throw bad('dag.start_date', 'is neither null nor an ISO-8601 moment');
  return Object.freeze({ key: schedule.signal, startDate });
}

/** The schedule part of a stored DAG, checked as the DAG constructor checks it. */
function readScheduleWindow(dag: any, bad: (field: string, why: string) => Error): ScheduleWindow | null {
  const schedule = dag.schedule;
  if (schedule === null || schedule === undefined) return null;
  const startDate = typeof dag.start_date === 'string' ? Date.parse(dag.start_date) : Number.NaN;
  if (!Number.isFinite(startDate)) throw bad('dag.start_date', 'is not an ISO-8601 moment (a schedule needs one)');
  const endDate = dag.end_date === null || dag.end_date === undefined ? null : Date.parse(dag.end_date);
  if (endDate !== null && !Number.isFinite(endDate)) throw bad('dag.end_date', 'is neither null nor an ISO-8601 moment');
  if (typeof dag.catchup !== 'boolean') throw bad('dag.catchup', 'is not true or false');
  let parsed: Schedule;
  if (typeof schedule?.cron === 'string' && typeof schedule.timezone === 'string') {
    if (!isTimeZone(schedule.timezone)) throw bad('dag.schedule.timezone', `${JSON.stringify(schedule.timezone)} is not an IANA time zone`);
    const problem = cronProblem(schedule.cron, schedule.timezone);
    if (problem) throw bad('dag.schedule.cron', problem);
    parsed = { kind: 'cron', cron: schedule.cron, timezone: schedule.timezone };
  } else if (Number.isInteger(schedule?.interval_ms) && schedule.interval_ms > 0) {
    parsed = { kind: 'interval', intervalMs: schedule.interval_ms };
  } else {
    throw bad('dag.schedule', 'is neither null, { cron, timezone } nor { interval_ms }');
  }
  return Object.freeze({ schedule: Object.freeze(parsed), startDate, endDate, catchup: dag.catchup });
}
