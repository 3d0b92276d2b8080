import { DateTime } from 'luxon';
import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { DAG_RUN_STATES, TASK_INSTANCE_STATES } from '../src/database/schema.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { TriggerEvent } from '../src/authoring/triggers/trigger-event.ts';
import type { DagRunStates } from '../src/model/dag-run-states.ts';
import { describeValue } from './date-time-trigger.ts';

/** What an external wait watches and which states end it (TaskStateTrigger's kwargs, ExternalTaskSensor's options). */
export interface TaskStateCheck {
  /** The DAG whose runs are watched. */
  readonly dagId: string;
  /** Its tasks whose instances must reach an allowed state; none (or null): the DAG run's own state. */
  readonly taskIds?: readonly string[] | null;
  /** The logical dates of the runs watched, ISO-8601 with an offset or Z; every one must be done. */
  readonly logicalDates: readonly string[];
  /** The states that count as done. @default ['success'] */
  readonly allowedStates?: readonly string[];
  /**
   * The states that end the wait as failed at once, without waiting for the timeout.
   * @default ['failed', 'upstream_failed'] for tasks, ['failed'] for a DAG run (less any allowed state)
   */
  readonly failedStates?: readonly string[];
  /** The states that end the wait as skipped. @default [] */
  readonly skippedStates?: readonly string[];
}

export interface TaskStateTriggerKwargs extends TaskStateCheck {
  /** Seconds between looks. @default 30 */
  readonly pollInterval?: number;
}

export type ResolvedTaskStateCheck = {
  readonly dagId: string;
  readonly taskIds: readonly string[] | null;
  readonly logicalDates: readonly string[];
  readonly allowedStates: readonly string[];
  readonly failedStates: readonly string[];
  readonly skippedStates: readonly string[];
};

/** How a look at the watched runs came out; `waiting`: look again later. */
export type TaskStateVerdict =
  | { readonly outcome: 'waiting' }
  | { readonly outcome: 'success' | 'failed' | 'skipped'; readonly reason: string; readonly states: Record<string, string> };

/** The event a TaskStateTrigger fires with. A type, so it is assignable to JsonValue. */
export type TaskStateEvent = {
  readonly outcome: 'success' | 'failed' | 'skipped';
  readonly reason: string;
  readonly dagId: string;
  readonly logicalDates: string[];
  /** The state of each watched task instance (or run), keyed `<logical date> <task id>` (or `<logical date>`). */
  readonly states: Record<string, string>;
};

const CHECK_FIELDS = ['dagId', 'taskIds', 'logicalDates', 'allowedStates', 'failedStates', 'skippedStates'];

/** The check with its defaults, every field validated: InvalidTriggerArgumentError naming `owner` and the field. */
export function resolveTaskStateCheck(given: TaskStateCheck, owner: string, extraFields: readonly string[] = []): ResolvedTaskStateCheck {
  const invalid = (why: string) => new InvalidTriggerArgumentError(owner, why);
  if (given === null || typeof given !== 'object') throw invalid(`expected { dagId, logicalDates, … }, got ${describeValue(given)}`);
  for (const key of Object.keys(given)) {
    if (!CHECK_FIELDS.includes(key) && !extraFields.includes(key))
      throw invalid(`unknown field ${JSON.stringify(key)} (the fields are ${[...CHECK_FIELDS, ...extraFields].join(', ')})`);
  }
  const { dagId, taskIds = null, logicalDates } = given;
  if (typeof dagId !== 'string' || dagId === '') throw invalid(`dagId ${describeValue(dagId)} is not a DAG id`);
  if (taskIds !== null && !(Array.isArray(taskIds) && taskIds.length > 0 && taskIds.every((id) => typeof id === 'string' && id !== ''))) {
    throw invalid(`taskIds ${describeValue(taskIds)} is not a list of task ids (leave it out to wait on the whole DAG run)`);
  }
  if (!Array.isArray(logicalDates) || logicalDates.length === 0) throw invalid(`logicalDates ${describeValue(logicalDates)} is not a list of moments`);
  const dates = [...new Set(logicalDates.map((date) => utcMoment(date, invalid)))].sort();
  const known: readonly string[] = taskIds === null ? DAG_RUN_STATES : TASK_INSTANCE_STATES;
  const what = taskIds === null ? 'DAG run' : 'task instance';
  const states = (field: string, value: unknown): string[] => {
    if (!Array.isArray(value) || !value.every((state) => known.includes(state as string))) {
      throw invalid(`${field} ${describeValue(value)} is not a list of ${what} states (${known.join(', ')})`);
    }
    return [...new Set(value as string[])].sort();
  };
  const allowedStates = states('allowedStates', given.allowedStates ?? ['success']);
  if (allowedStates.length === 0) throw invalid('allowedStates is empty: nothing could end the wait');
  const failedStates = states(
    'failedStates',
    given.failedStates ?? (taskIds === null ? ['failed'] : ['failed', 'upstream_failed']).filter((state) => !allowedStates.includes(state)),
  );
  const skippedStates = states('skippedStates', given.skippedStates ?? []);
  for (const [field, list] of [
    ['failedStates', failedStates],
    ['skippedStates', skippedStates],
  ] as const) {
    const both = list.filter((state) => allowedStates.includes(state));
    if (both.length > 0) throw invalid(`${field} and allowedStates both hold ${both.join(', ')}: a state can end the wait one way only`);
  }
  const failedAndSkipped = failedStates.filter((state) => skippedStates.includes(state));
  if (failedAndSkipped.length > 0) throw invalid(`failedStates and skippedStates both hold ${failedAndSkipped.join(', ')}`);
  return { dagId, taskIds: taskIds === null ? null : [...new Set(taskIds)].sort(), logicalDates: dates, allowedStates, failedStates, skippedStates };
}

/**
 * Judges the watched runs (one entry per logical date, null where the run does not exist yet):
 * failed as soon as any watched instance (or run) is in a failed state, or a run lacks a task
 * the check names; else skipped as soon as one is in a skipped state; success once every one is
 * in an allowed state; otherwise waiting. A run that does not exist yet is waited for.
 */
export function judgeTaskStates(check: ResolvedTaskStateCheck, runs: readonly (DagRunStates | null)[]): TaskStateVerdict {
  const states: Record<string, string> = {};
  let waiting = false;
  let failed: string | null = null;
  let skipped: string | null = null;
  check.logicalDates.forEach((date, i) => {
    const run = runs[i] ?? null;
    if (run === null) {
      waiting = true;
      return;
    }
    const watched: [string, string | null][] =
      check.taskIds === null
        ? [[date, run.state]]
        : check.taskIds.flatMap((taskId) => (run.taskStates[taskId] ?? []).map((state): [string, string | null] => [`${date} ${taskId}`, state]));
    for (const taskId of check.taskIds ?? []) {
      if (!run.taskStates[taskId]) failed ??= `DAG run ${run.runId} of ${check.dagId} has no task ${JSON.stringify(taskId)}`;
    }
    for (const [key, state] of watched) {
      states[key] = state ?? 'none';
      if (state !== null && check.failedStates.includes(state)) failed ??= `${describeWatched(check, key)} is ${state}`;
      else if (state !== null && check.skippedStates.includes(state)) skipped ??= `${describeWatched(check, key)} is ${state}`;
      else if (state === null || !check.allowedStates.includes(state)) waiting = true;
    }
  });
  if (failed !== null) return { outcome: 'failed', reason: failed, states };
  if (skipped !== null) return { outcome: 'skipped', reason: skipped, states };
  if (waiting) return { outcome: 'waiting' };
  return { outcome: 'success', reason: `${describeTarget(check)} reached ${check.allowedStates.join(' or ')}`, states };
}

function describeWatched(check: ResolvedTaskStateCheck, key: string): string {
  const [date, taskId] = key.split(' ');
  return taskId === undefined ? `DAG run of ${check.dagId} at ${date}` : `task ${check.dagId}.${taskId} of the run at ${date}`;
}

function describeTarget(check: ResolvedTaskStateCheck): string {
  const dates = check.logicalDates.join(', ');
  return check.taskIds === null ? `the DAG run(s) of ${check.dagId} at ${dates}` : `task(s) ${check.taskIds.join(', ')} of ${check.dagId} at ${dates}`;
}

/** A moment with an offset or Z, as canonical UTC ISO (so equal waits serialize alike and share a row). */
function utcMoment(value: unknown, invalid: (why: string) => Error): string {
  const parsed = typeof value === 'string' ? DateTime.fromISO(value, { setZone: true }) : null;
  if (!parsed?.isValid || !/(?:Z|[+-]\d\d(?::?\d\d)?)$/i.test(value as string)) {
    throw invalid(`logicalDates holds ${describeValue(value)}, which is not an ISO-8601 moment with an offset or Z`);
  }
  return parsed.toUTC().toISO()!;
}

/**
 * Waits until task instances of another DAG (or whole DAG runs), for the given logical dates,
 * reach an allowed state (Airflow's TaskStateTrigger / WorkflowTrigger): it fires with
 * `{ outcome: 'success', … }` then, and fails fast, firing `{ outcome: 'failed', … }` the moment
 * one reaches a failed state (or `skipped` for a skipped state); the resumed ExternalTaskSensor
 * turns those into its own failure or skip. It reads deferflow's own database through
 * `this.dagRunStates()`, read-only and batched: however many wait, the triggerer asks at most once
 * a second. Identical waits share one trigger row.
 */
export class TaskStateTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.TaskStateTrigger';
  readonly check: ResolvedTaskStateCheck;
  readonly pollInterval: number;

  constructor(kwargs: TaskStateTriggerKwargs) {
    super();
    const { pollInterval = 30, ...check } = kwargs ?? ({} as TaskStateTriggerKwargs);
    this.check = resolveTaskStateCheck(check as TaskStateCheck, 'TaskStateTrigger', ['pollInterval']);
    if (typeof pollInterval !== 'number' || !(pollInterval > 0))
      throw new InvalidTriggerArgumentError('TaskStateTrigger', `pollInterval ${describeValue(pollInterval)} is not a number of seconds above 0`);
    this.pollInterval = pollInterval;
  }

  override serialize(): SerializedTrigger {
    const { dagId, taskIds, logicalDates, allowedStates, failedStates, skippedStates } = this.check;
    return {
      classpath: TaskStateTrigger.classpath,
      kwargs: {
        dagId,
        taskIds: taskIds === null ? null : [...taskIds],
        logicalDates: [...logicalDates],
        allowedStates: [...allowedStates],
        failedStates: [...failedStates],
        skippedStates: [...skippedStates],
        pollInterval: this.pollInterval,
      },
    };
  }

  override describeWait(): string {
    return describeTarget(this.check);
  }

  override async *run(): AsyncGenerator<TriggerEvent<TaskStateEvent>> {
    const { dagId, taskIds, logicalDates } = this.check;
    for (;;) {
      const runs = await Promise.all(logicalDates.map((logicalDate) => this.dagRunStates({ dagId, logicalDate, taskIds })));
      const verdict = judgeTaskStates(this.check, runs);
      if (verdict.outcome !== 'waiting') {
        yield new TriggerEvent({ outcome: verdict.outcome, reason: verdict.reason, dagId, logicalDates: [...logicalDates], states: verdict.states });
        return;
      }
      await this.sleep(this.pollInterval * 1000);
    }
  }
}
