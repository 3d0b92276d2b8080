import type { ScheduleWindow } from './schedule.ts';
import type { RetryPolicy } from './retry-policy.ts';
import type { JsonObject, JsonValue } from '../vocabulary/serialization/json.ts';
import type { TriggerRule } from './trigger-rules.ts';
import type { SignalAction } from './signal-actions.ts';

/**
 * What the scheduler knows of a DAG: structure and settings, no code. It is read from the
 * serialized DAG (never by importing the DAG file), so a slow or broken file cannot stall
 * scheduling.
 */
export interface SchedulerDag {
  /** The DAG's id. */
  readonly dagId: string;
  /** The serialized version's hash, recorded on the runs it creates. */
  readonly hash: string;
  /** Its tasks, as the scheduler needs them (dependencies, trigger rules, retries, signal actions). */
  readonly tasks: readonly SchedulerTask[];
  /** When it runs by itself on a clock; null when only triggered (or scheduled on a signal). */
  readonly schedule: ScheduleWindow | null;
  /** The signal each new version of which creates a run; null when not scheduled on a signal. */
  readonly signalSchedule: SignalSchedule | null;
  /** The watchers each event of which creates a run; null when not scheduled on watchers. */
  readonly watchSchedule: WatchSchedule | null;
}

/**
 * A DAG scheduled on watchers (issue 45): triggers the triggerer runs for as long as a DAG
 * (not deleted) is scheduled on them, each event they yield making one run of every DAG
 * watching (run id `event__<the event's key>`, conf `{ event: { key, payload, trigger } }`).
 */
export interface WatchSchedule {
  /**
   * The watcher triggers, as stored: classpath and constructor kwargs (what makes the row), and the
   * events this DAG takes from the watcher, a subset match on each payload (absent: every event).
   */
  readonly watchers: readonly {
    readonly classpath: string;
    readonly kwargs: JsonObject;
    readonly eventFilter?: JsonValue;
    /** The broker-side consumer it reads through (BaseTrigger.watcherConsumer): known where the DAG is loaded, never stored. */
    readonly consumer?: string;
  }[];
  /** The queue the watchers run in (triggerers serving it run them). */
  readonly queue: string;
}

/**
 * A DAG scheduled on a signal key (AIP-35): each new version of the key creates one run
 * (run id `signal__<version>`, conf `{ signal: { key, version, value, sentAt } }`, logical date
 * the signal's send time). Versions sent while no scheduler ran are caught up from the DAG's last
 * signal run; before its first, from `startDate` (versions sent since then) or, without one,
 * from the versions sent after a scheduler first saw the DAG (recorded, so every scheduler and a
 * restarted one agree).
 */
export interface SignalSchedule {
  readonly key: string;
  /** Epoch ms, or null. */
  readonly startDate: number | null;
}

export interface SchedulerTask {
  readonly taskId: string;
  /** The operator's class name, for people reading the rows. */
  readonly operator: string;
  readonly upstreamTaskIds: readonly string[];
  readonly triggerRule: TriggerRule;
  /** How failed tries are retried; the scheduler applies it to tries a dead worker left behind. */
  readonly retry: RetryPolicy;
  readonly priorityWeight: number;
  /** Set for a task that starts from a trigger: the scheduler defers it, no worker slot needed. */
  readonly startTrigger: StartTrigger | null;
  /** Signals that start, restart or stop it (see signal-actions.ts); empty for none. */
  readonly signalActions: readonly SignalAction[];
  /** Its queue (see queues.ts). */
  readonly queue: string;
}

export interface StartTrigger {
  readonly classpath: string;
  readonly kwargs: JsonObject;
  /** The operator method the task resumes at when the trigger fires. */
  readonly method: string;
  readonly nextKwargs: JsonObject;
  readonly timeoutMs: number | null;
}

/** The DAG structure a run was made from, read from the serialized DAGs; null when unknown. */
export type DagSource = (dagId: string) => Promise<SchedulerDag | null>;

/** `taskIds` and every task downstream of them, however far (a clear with downstream). */
export function withDownstream(dag: Pick<SchedulerDag, 'tasks'>, taskIds: Iterable<string>): Set<string> {
  const downstreamOf = new Map<string, string[]>();
  for (const task of dag.tasks) for (const upstream of task.upstreamTaskIds) downstreamOf.set(upstream, [...(downstreamOf.get(upstream) ?? []), task.taskId]);
  const found = new Set(taskIds);
  const pending = [...found];
  for (let taskId = pending.pop(); taskId !== undefined; taskId = pending.pop())
    for (const next of downstreamOf.get(taskId) ?? []) {
      if (found.has(next)) continue;
      found.add(next);
      pending.push(next);
    }
  return found;
}
