import { DateTime, Duration } from 'luxon';
import { InvalidOptionError, type DeferflowErrorCode } from '../../vocabulary/errors.ts';
import { durationToMs, type DurationInput } from '../../vocabulary/time/duration.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';

/*
 * Besides returning, throwing or deferring, a task may end its try three more ways (Airflow's
 * AirflowSkipException, AirflowRescheduleException and AirflowFailException):
 * - TaskSkipped: the task is skipped (downstream tasks follow their trigger rules);
 * - TaskRescheduled: the task runs again, afresh, at a later moment (a sensor in reschedule
 *   mode); the try does not count against its retries;
 * - TaskFailedWithoutRetry: the task fails at once, whatever retries it has left (retrying
 *   cannot help: a sensor that timed out).
 * Operators throw them through `this.skip()`, `this.reschedule()` and `this.fail()`. Like
 * TaskDeferred they are recognised by a registered symbol: a DAG file loaded as CommonJS throws
 * its own copy.
 */
const SKIPPED_BRAND = Symbol.for('deferflow.TaskSkipped');
const RESCHEDULED_BRAND = Symbol.for('deferflow.TaskRescheduled');
const FAILED_BRAND = Symbol.for('deferflow.TaskFailedWithoutRetry');

/** Thrown by a task to end its try as skipped (Airflow's AirflowSkipException). */
export class TaskSkipped extends Error {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [SKIPPED_BRAND] = true;
  /** Why the task skipped itself (logged). */
  readonly reason: string;

  constructor(reason = 'skipped by the task') {
    super(reason);
    this.reason = reason;
    this.name = 'TaskSkipped';
  }
}

/** Thrown by a sensor in reschedule mode to give its slot back until its next poke. */
export class TaskRescheduled extends Error {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [RESCHEDULED_BRAND] = true;
  /** Epoch ms: the task instance is not scheduled again before it. */
  readonly readyAt: number;

  /** `at`: a moment (Date, ISO string with offset, luxon DateTime), or a delay from now (Duration or seconds). */
  constructor(at: Date | string | DateTime | DurationInput) {
    const readyAt = rescheduleMoment(at);
    super(`task rescheduled to ${new Date(readyAt).toISOString()}`);
    this.name = 'TaskRescheduled';
    this.readyAt = readyAt;
  }
}

/** Thrown by a task to fail its try with no retry, whatever retries it has left. */
export class TaskFailedWithoutRetry extends Error {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [FAILED_BRAND] = true;
  /** `code`: the stable code the failure is logged with (DF_TASK_FAILED unless said otherwise). */
  constructor(
    message: string,
    /** The stable code the failure is logged with. */
    readonly code: DeferflowErrorCode = 'DF_TASK_FAILED',
  ) {
    super(message);
    this.name = 'TaskFailedWithoutRetry';
  }
}

/** Whether a thrown value is a TaskFailedWithoutRetry (a brand check: true whichever copy of deferflow made it). */
export function isTaskFailedWithoutRetry(thrown: unknown): thrown is TaskFailedWithoutRetry {
  return typeof thrown === 'object' && thrown !== null && (thrown as Record<symbol, unknown>)[FAILED_BRAND] === true;
}

/** Whether a thrown value is a TaskSkipped (a brand check: true whichever copy of deferflow made it). */
export function isTaskSkipped(thrown: unknown): thrown is TaskSkipped {
  return typeof thrown === 'object' && thrown !== null && (thrown as Record<symbol, unknown>)[SKIPPED_BRAND] === true;
}

/** Whether a thrown value is a TaskRescheduled (a brand check: true whichever copy of deferflow made it). */
export function isTaskRescheduled(thrown: unknown): thrown is TaskRescheduled {
  return typeof thrown === 'object' && thrown !== null && (thrown as Record<symbol, unknown>)[RESCHEDULED_BRAND] === true;
}

function rescheduleMoment(at: unknown): number {
  if (typeof at === 'number' || Duration.isDuration(at)) return Date.now() + durationToMs(at, 'reschedule');
  if (at instanceof Date && Number.isFinite(at.getTime())) return at.getTime();
  if (DateTime.isDateTime(at) && at.isValid) return at.toMillis();
  if (typeof at === 'string' && /(Z|[+-]\d\d:?\d\d)$/.test(at) && Number.isFinite(Date.parse(at))) return Date.parse(at);
  throw new InvalidOptionError(
    'reschedule',
    `expected a moment (Date, ISO-8601 string with an offset, luxon DateTime) or a delay (Duration or seconds), got ${JSON.stringify(at) ?? typeof at}`,
  );
}

const AWAITING_INPUT_BRAND = Symbol.for('deferflow.TaskAwaitingInput');

/**
 * Thrown by BaseOperator.awaitInput() once the question is recorded: the try gives its worker slot
 * back and the task instance awaits input (no trigger row); it resumes at `method`, called as
 * `method(context, response, kwargs)`.
 */
export class TaskAwaitingInput extends Error {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [AWAITING_INPUT_BRAND] = true;

  constructor(
    /** The method the task resumes at. */
    readonly method: string,
    /** The kwargs that method is given beside the response. */
    readonly kwargs: JsonObject,
  ) {
    super(`task awaits input; resumes at ${method}`);
    this.name = 'TaskAwaitingInput';
  }
}

/** Whether a thrown value is a TaskAwaitingInput (a brand check: true whichever copy of deferflow made it). */
export function isTaskAwaitingInput(thrown: unknown): thrown is TaskAwaitingInput {
  return typeof thrown === 'object' && thrown !== null && (thrown as Record<symbol, unknown>)[AWAITING_INPUT_BRAND] === true;
}

const BRANCH_BRAND = Symbol.for('deferflow.BranchResult');

/**
 * What a branching task returns (BaseOperator.branch()): its value, and the downstream tasks to
 * follow. Its other direct downstream tasks are skipped as it succeeds, in the same transaction;
 * theirs follow their trigger rules (a join after branches wants `none_failed`).
 */
export class BranchResult {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [BRANCH_BRAND] = true;

  constructor(
    /** The direct downstream task ids to follow. */
    readonly followTaskIds: readonly string[],
    /** The task's return value (JSON). */
    readonly value: unknown,
  ) {}
}

/** Whether a returned value is a BranchResult (a brand check: true whichever copy of deferflow made it). */
export function isBranchResult(returned: unknown): returned is BranchResult {
  return typeof returned === 'object' && returned !== null && (returned as Record<symbol, unknown>)[BRANCH_BRAND] === true;
}
