import type { ScheduleWindow } from './schedule.ts';
import type { RetryPolicy } from './retry-policy.ts';
import type { JsonObject } from '../serialization/json.ts';
import type { TriggerRule } from './trigger-rules.ts';

/**
 * What the scheduler knows of a DAG: structure and settings, no code. It is read from the
 * serialized DAG (never by importing the DAG file), so a slow or broken file cannot stall
 * scheduling.
 */
export interface SchedulerDag {
  readonly dagId: string;
  /** The serialized version's hash, recorded on the runs it creates. */
  readonly hash: string;
  readonly tasks: readonly SchedulerTask[];
  /** When it runs by itself; null when only triggered. */
  readonly schedule: ScheduleWindow | null;
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
