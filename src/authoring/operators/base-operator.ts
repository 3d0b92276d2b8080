import {
  describeThrown,
  InputTimeoutError,
  InvalidDagError,
  InvalidInputRequestError,
  TaskDeferralError,
  TaskDeferralTimeout,
  UnknownNextMethodError,
} from '../../vocabulary/errors.ts';
import { checkQuestion, type InputField, type InputQuestion } from '../../model/human-input.ts';
import { assertJsonObject } from '../../vocabulary/serialization/json.ts';
import { durationToMs } from '../../vocabulary/time/duration.ts';
import { TRIGGER_FAILURE_METHOD, type FailureKwargs } from '../../model/failure-marker.ts';
import type { TaskReschedule } from '../../model/task-reschedule.ts';
import type { DagRunStates, DagRunStatesQuery } from '../../model/dag-run-states.ts';
import type { TriggerRule } from '../../model/trigger-rules.ts';
import type { ActedSignal, StartCondition, StopEndState } from '../../model/signal-actions.ts';
import type { Logger } from 'pino';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';
import type { DurationInput } from '../../vocabulary/time/duration.ts';
import type { BaseTrigger } from '../triggers/base-trigger.ts';
import { TaskDeferred, type DeferralRequest } from './task-deferred.ts';
import { SignalTrigger } from '../triggers/signal-trigger.ts';
import { BranchResult, TaskAwaitingInput, TaskFailedWithoutRetry, TaskRescheduled, TaskSkipped } from './task-signals.ts';
import type { DateTime } from 'luxon';
import type { TaskState } from './task-state.ts';

/** What a running task sees of itself. */
export interface TaskInstanceRef {
  /** The task instance row's id. */
  readonly id: number;
  /** Its DAG's id. */
  readonly dagId: string;
  /** Its task's id. */
  readonly taskId: string;
  /** Its DAG run's id. */
  readonly runId: string;
  /** Its map index (-1: not a mapped task). */
  readonly mapIndex: number;
  /** The try it is on, from 1. */
  readonly tryNumber: number;
}

/** What a task is given as it runs: its task instance, the logical date and interval, its logger, the results of upstream tasks (xcomPull). */
export interface TaskContext {
  /** The task instance being run. */
  readonly taskInstance: TaskInstanceRef;
}

/** What a task run by a worker sees: its DAG run, params, a logger, and upstream return values. */
export interface RuntimeContext extends TaskContext {
  /** The DAG run the task instance belongs to: its id, logical date, conf and data interval. */
  readonly dagRun: {
    readonly runId: string;
    /** ISO-8601 (UTC). */
    readonly logicalDate: string;
    readonly conf: JsonObject;
    /** The data interval a scheduled run covers (ISO-8601, UTC); null for a manual run. */
    readonly dataIntervalStart: string | null;
    readonly dataIntervalEnd: string | null;
  };
  /** The DAG's params with the task's own laid over them. */
  readonly params: JsonObject;
  /** A pino logger bound to the task instance (dag_id, task_id, run_id, try); its lines make up the task log. */
  readonly log: Logger;
  /**
   * Aborted when the task's execution timeout passes, or when the worker shuts down before the
   * task finished (the try is then retried): pass it to fetch() and the like. JavaScript cannot
   * stop code that ignores it; its result is ignored.
   */
  readonly signal: AbortSignal;
  /** The JSON value task `taskId` of the same DAG run returned, or null. */
  xcomPull(taskId: string): Promise<JsonValue | null>;
  /**
   * This task instance's durable state: JSON values by key, kept across its tries and deferrals
   * (a try that submitted an external job keeps its id here; the retry after a crash finds it and
   * re-attaches instead of submitting again). See TaskState.
   */
  readonly state: TaskState;
  /**
   * Records a question to a person for this try and returns its signed link (what awaitInput()
   * does before the try waits; call that instead). A retried or cleared try gets DF_TRY_TAKEN_OVER.
   */
  askForInput(question: InputQuestion, timeoutMs: number | null): Promise<AskedQuestion>;
  /** This try's reschedules so far, oldest first (a sensor in reschedule mode counts its timeout from the first). */
  taskReschedules(): Promise<readonly TaskReschedule[]>;
  /**
   * A DAG run's states (by DAG and logical date) and those of some of its task instances, from
   * deferflow's own database; null while the run does not exist. Read-only; the reads of every
   * task on a worker are batched into at most one query a second.
   */
  dagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null>;
  /** Sends a signal (AIP-35) on `key` with a JSON value; resolves with its version. */
  sendSignal(key: string, value?: JsonValue): Promise<number>;
  /** The key's latest signal version (0: none yet): what waitForSignal waits after. */
  latestSignalVersion(key: string): Promise<number>;
  /**
   * The signal on `key` that last started, restarted or stopped this task instance through its
   * declared `signals` action (`{ key, version, value, sentAt }`; value and sentAt are null once
   * retention pruned it), or null when none has: a batch task restarted per signal reads which
   * batch it runs for.
   */
  actedSignal(key: string): Promise<ActedSignal | null>;
  /**
   * The deployment's `--smart-sensors`: sensor classes (by classpath or class name), or `all`,
   * that wait consolidated on the triggerer whatever mode their DAG gave them. Undefined: none.
   */
  readonly smartSensors?: 'all' | readonly string[];
}

/** A question as recorded: its signed link (no login needed to answer through it) and until when it is valid. */
export interface AskedQuestion {
  /** `<publicUrl>/input/<token>`: the page that shows the question and takes the response. */
  readonly link: string;
  /** ISO-8601; null: no timeout. */
  readonly expiresAt: string | null;
}

/** What an onAwaitingInput hook is given: the task, the question and the link to send a person. */
export interface AwaitingInputNotice {
  /** The task instance asking. */
  readonly taskInstance: TaskInstanceRef;
  /** The question, as recorded. */
  readonly question: InputQuestion;
  /** Its signed link (`<publicUrl>/input/<token>`): no login needed to answer through it. */
  readonly link: string;
  /** ISO-8601; null: no timeout. */
  readonly expiresAt: string | null;
}

/** Sends a question's link where a person sees it (mail, chat, a webhook); an error is logged, and the question stays answerable. */
export type OnAwaitingInput = (notice: AwaitingInputNotice) => void | Promise<void>;

/** What awaitInput() asks: the question, where to resume, and how long to wait. */
export interface InputRequest {
  /** One line: what is asked. */
  readonly subject: string;
  /** More text (plain). */
  readonly body?: string;
  /** The answers offered as buttons; may be empty when the form is all. */
  readonly options?: readonly string[];
  /** Whether several options may be chosen. Default false. */
  readonly multiple?: boolean;
  /** The form's fields (text, number, boolean, choice). */
  readonly fields?: readonly InputField[];
  /** What the timeout answers, recorded as given by `timeout`; none: the task fails (DF_INPUT_TIMEOUT) at the timeout. */
  readonly defaults?: { readonly chosen?: readonly string[]; readonly values?: JsonObject };
  /** How long to wait (Duration or seconds); none: for as long as it takes (or the execution timeout). */
  readonly timeout?: DurationInput | null;
  /** The operator method to resume at, called as `method(context, response, kwargs)`. */
  readonly method: string;
  /** JSON kwargs handed back to that method. */
  readonly kwargs?: JsonObject;
  /** Called with the question's link once it is recorded, before the try waits: send it to a person. */
  readonly onAwaitingInput?: OnAwaitingInput;
}

/** Settings a task takes from its DAG's default args unless it sets its own. */
export interface TaskDefaults {
  /** Retries after the first try. Default 0. */
  readonly retries?: number;
  /** Wait before a retry (luxon Duration or seconds). Default 300 s. */
  readonly retryDelay?: DurationInput;
  /** Double the wait after each further failure. Default false. */
  readonly retryExponentialBackoff?: boolean;
  /** Cap on the wait between tries (with backoff). Default none. */
  readonly maxRetryDelay?: DurationInput | null;
  /** The whole task's time budget, deferrals included. Default none. */
  readonly executionTimeout?: DurationInput | null;
  /** Claimed before lower weights, by workers and triggerers alike. Default 1. */
  readonly priorityWeight?: number;
  /** When the task may run, given its upstreams. Default all_success. */
  readonly triggerRule?: TriggerRule;
  /**
   * The queue it runs in: only workers started with `--queues` naming it run it, and the
   * triggers it defers on go to triggerers serving it. Default `default` (workers and triggerers
   * given no `--queues`).
   */
  readonly queue?: string;
}

/**
 * A task that starts from a trigger (Airflow's start_from_trigger): the scheduler defers it at
 * once, no worker slot taken, and it resumes at `method` when the trigger fires.
 */
export interface StartTriggerOptions {
  /** The trigger the task starts waiting on. */
  readonly trigger: BaseTrigger;
  /** The method it resumes at when the trigger fires. */
  readonly method: string;
  /** Kwargs handed to that method (JSON). */
  readonly kwargs?: JsonObject;
  /** How long it may wait (seconds or a Duration); null or absent: no limit. */
  readonly timeout?: DurationInput | null;
}

/**
 * A signal that starts, restarts or stops the task (AIP-35), acted on by the scheduler once per
 * new version of the key sent after the DAG run was created (see src/model/signal-actions.ts):
 * - `start`: run the task when the signal comes; `condition` `sufficient` (the default):
 *   whatever its upstreams; `necessary`: only once its upstreams also let it run;
 * - `restart`: each new version runs the task again, a new try, even if it finished; a try
 *   running or deferred is stopped first (with no state yet, it just starts);
 * - `stop`: a task not finished is stopped (its trigger killed, a running try aborted through
 *   context.signal) and ends in `endState`, skipped by default.
 */
export type SignalActionOptions =
  | { readonly key: string; readonly action: 'start'; readonly condition?: StartCondition }
  | { readonly key: string; readonly action: 'restart' }
  | { readonly key: string; readonly action: 'stop'; readonly endState?: StopEndState };

/** A task's options: its id, and what it overrides of the DAG's task defaults. */
export interface TaskOptions extends TaskDefaults {
  /** Letters, digits, `_`, `-` and `.`; unique within its DAG. */
  readonly taskId: string;
  /** Task params, laid over the DAG's params. */
  readonly params?: JsonObject;
  /** Start from this trigger instead of running execute() on a worker (Airflow's start_from_trigger). */
  readonly startTrigger?: StartTriggerOptions;
  /** Signals that start, restart or stop this task; one action per key. Default none. */
  readonly signals?: readonly SignalActionOptions[];
}

/** What can be chained: one task, or several side by side. */
/**
 * An operator whatever context it takes: what a DAG holds. (`any`, not `unknown`: a context
 * type is a method parameter, so BaseOperator<RuntimeContext> is not a BaseOperator<TaskContext>.)
 */
// biome-ignore lint/suspicious/noExplicitAny: the one place that spells "whatever context", see above
export type AnyOperator = BaseOperator<any>;

/** What can be chained: one task, or several side by side. */
export type TaskOrTasks = AnyOperator | readonly AnyOperator[];

const TASK_ID = /^[A-Za-z0-9_.-]+$/;

/**
 * An operator does a task's work in execute(). One that must wait calls this.defer(...),
 * which throws TaskDeferred: the worker records the deferral and frees its slot, and when the
 * trigger fires the task resumes at `method`, called as `method(context, event, kwargs)`.
 *
 * In a DAG, an operator is a task: `new MyOperator({ taskId: 'extract', retries: 2 })`, added
 * with `dag.add(...)`, and ordered with `extract.before(transform).before(load)` or
 * `extract.before([a, b])`. An operator used on its own (no DAG) needs no options.
 */
export abstract class BaseOperator<Context extends TaskContext = TaskContext> {
  readonly #options: TaskOptions | undefined;
  readonly #upstream = new Set<AnyOperator>();
  /** The DAG that owns this task, once added (its dag_id). */
  dagId: string | null = null;

  constructor(options?: TaskOptions) {
    if (options !== undefined) {
      if (typeof options.taskId !== 'string' || !TASK_ID.test(options.taskId)) {
        throw new InvalidDagError(`task id ${JSON.stringify(options.taskId)} must be letters, digits, "_", "-" or "."`);
      }
      this.#options = Object.freeze({ ...options });
    }
  }

  /** What the task does: return a value (its result), throw, or defer() to wait on a trigger. */
  abstract execute(context: Context): unknown;

  /** Hands the wait to the triggerer: throws a TaskDeferred (checked here) carrying the trigger, the method to resume at and its kwargs; the task's worker slot is free until the trigger fires. */
  defer(request: DeferralRequest): never {
    throw new TaskDeferred(request);
  }

  /**
   * Defers until a signal on `key` newer than the key's latest version now (optionally one whose
   * value matches `match`, see SignalTrigger) and resumes at `method` as
   * `method(context, signal, kwargs)`, the signal being `{ key, version, value, sentAt }`.
   * The version is read before the task defers, so a signal sent right after this call is never
   * missed and one sent before it never wakes the task. Use it as `return this.waitForSignal(…)`
   * in an async execute(); `timeout` fails the task cleanly (TaskDeferralTimeout) if no signal
   * came. Task instances waiting on the same key from the same version share one trigger.
   */
  async waitForSignal(
    context: Pick<RuntimeContext, 'latestSignalVersion'>,
    key: string,
    options: { readonly method: string; readonly match?: JsonValue; readonly kwargs?: JsonObject; readonly timeout?: DurationInput | null },
  ): Promise<never> {
    return this.defer({
      trigger: await this.signalTrigger(context, key, options.match === undefined ? {} : { match: options.match }),
      method: options.method,
      ...(options.kwargs === undefined ? {} : { kwargs: options.kwargs }),
      ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    });
  }

  /**
   * The trigger waitForSignal waits on: a signal on `key` newer than its latest version now
   * (optionally matching `match`). For a wait that combines it with others:
   * `this.defer({ trigger: anyOf([await this.signalTrigger(context, 'approved'), new DateTimeTrigger({ moment })]), method: 'resume' })`.
   */
  async signalTrigger(context: Pick<RuntimeContext, 'latestSignalVersion'>, key: string, options: { readonly match?: JsonValue } = {}): Promise<SignalTrigger> {
    const sinceVersion = await context.latestSignalVersion(key);
    return new SignalTrigger({ key, sinceVersion, ...(options.match === undefined ? {} : { match: options.match }) });
  }

  /**
   * Asks a person a question and waits for the response without a worker slot or a trigger row:
   * the task instance goes to `awaiting_input` and resumes at `method` as
   * `method(context, response, kwargs)`, the response being `{ chosen, values, by, at, source }`.
   * The question is recorded first, and `onAwaitingInput` is given its signed link (to send by
   * mail or chat); a response can also come from `deferflow tasks respond`, the HTTP API, the
   * embedded API or the status page. The first response wins. At `timeout`, `defaults` answer as
   * if a person had (source `timeout`), or, with none, the task fails with DF_INPUT_TIMEOUT. Use
   * it as `return this.awaitInput(context, {…})` in an async execute().
   */
  async awaitInput(context: Pick<RuntimeContext, 'askForInput' | 'taskInstance' | 'log'>, request: InputRequest): Promise<never> {
    const question = checkQuestion(request);
    if (typeof request.method !== 'string' || request.method === '')
      throw new InvalidInputRequestError('awaitInput: method must name the operator method to resume at');
    const kwargs = request.kwargs ?? {};
    assertJsonObject(kwargs, 'awaitInput kwargs');
    const timeoutMs = request.timeout === undefined || request.timeout === null ? null : durationToMs(request.timeout, 'awaitInput.timeout');
    const asked = await context.askForInput(question, timeoutMs);
    if (request.onAwaitingInput) {
      try {
        await request.onAwaitingInput({ taskInstance: context.taskInstance, question, link: asked.link, expiresAt: asked.expiresAt });
      } catch (error) {
        // The question stands: it can be answered from the CLI, the API or the status page.
        context.log.warn(
          { ...describeThrown(error), code: 'DF_TASK_FAILED' },
          `onAwaitingInput failed; the question "${question.subject}" still waits for a response (${asked.link})`,
        );
      }
    }
    throw new TaskAwaitingInput(request.method, kwargs);
  }

  /**
   * What a branching task returns: `value` as its return value, and of its direct downstream
   * tasks only `followTaskIds` run; the others are skipped as it succeeds (theirs then follow
   * their trigger rules: a join after branches wants `triggerRule: 'none_failed'`).
   */
  branch(followTaskIds: readonly string[], value?: unknown): BranchResult {
    if (!Array.isArray(followTaskIds) || followTaskIds.some((id) => typeof id !== 'string'))
      throw new InvalidDagError(`${this.constructor.name}.branch: followTaskIds must be a list of task ids`);
    return new BranchResult(followTaskIds, value);
  }

  /** Ends this try as skipped (downstream tasks follow their trigger rules). */
  skip(reason?: string): never {
    throw new TaskSkipped(reason);
  }

  /** Fails this try without a retry, whatever retries the task has left (retrying cannot help). */
  fail(reason: string): never {
    throw new TaskFailedWithoutRetry(reason);
  }

  /**
   * Ends this try and runs the task again, afresh, at `at` (a moment, or a delay from now),
   * without spending a retry: a sensor in reschedule mode frees its slot between pokes.
   */
  reschedule(at: Date | string | DateTime | DurationInput): never {
    throw new TaskRescheduled(at);
  }

  /**
   * Resumes the task after a deferral: calls `nextMethod` as `method(context, event, kwargs)`.
   * After a trigger failure or a deferral timeout (the failure marker) it throws
   * TaskDeferralError or TaskDeferralTimeout instead. Override it to handle those (a sensor with
   * softFail skips instead); the worker and resumeTaskInstance call it.
   */
  resumeExecution(context: Context, nextMethod: string, nextKwargs: JsonObject): unknown {
    if (nextMethod === TRIGGER_FAILURE_METHOD) {
      const failure = nextKwargs as unknown as FailureKwargs;
      if (failure.reason === 'timeout') throw new TaskDeferralTimeout(failure.error);
      if (failure.reason === 'input_timeout') throw new InputTimeoutError(failure.error);
      // Markers written before codes existed carry none.
      const code = failure.code ?? 'DF_TRIGGER_FAILED';
      throw new TaskDeferralError(`the trigger failed [${code}]: ${failure.error}`, failure.traceback ?? null, 'DF_TASK_DEFERRAL', code);
    }
    const { event, ...rest } = nextKwargs as JsonObject & { event?: JsonValue };
    const method = (this as unknown as Record<string, unknown>)[nextMethod];
    if (typeof method !== 'function') throw new UnknownNextMethodError(this.constructor.name, nextMethod);
    return method.call(this, context, event ?? null, rest);
  }

  /** The task id, or an error for an operator made without options (it cannot be a task). */
  get taskId(): string {
    if (!this.#options) throw new InvalidDagError(`${this.constructor.name} has no taskId: pass { taskId } to its constructor to use it in a DAG`);
    return this.#options.taskId;
  }

  /** The options given to the constructor (frozen). */
  get taskOptions(): TaskOptions {
    this.taskId; // throws with the explanation when there are none
    return this.#options!;
  }

  /** The tasks this one waits for. */
  get upstream(): ReadonlySet<AnyOperator> {
    return this.#upstream;
  }

  /**
   * Makes `next` (a task, or several) run after this one, and returns it, so chains read in
   * order: `extract.before(transform).before(load)`, `start.before([a, b])`. (Not `then`: an
   * object with a then() method is a thenable, and `await` or an async function returning the
   * operator would call it.)
   */
  before<Next extends TaskOrTasks>(next: Next): Next {
    for (const task of Array.isArray(next) ? next : [next as AnyOperator]) task.#upstream.add(this);
    return next;
  }
}

/**
 * Each step runs after the one before: `chain(extract, [clean, enrich], load)` makes clean and
 * enrich wait for extract, and load wait for both (Airflow's chain).
 */
export function chain(...steps: readonly TaskOrTasks[]): void {
  for (let i = 1; i < steps.length; i++) {
    const before = steps[i - 1]!;
    for (const task of Array.isArray(before) ? before : [before as AnyOperator]) task.before(steps[i]!);
  }
}

/**
 * The resume itself, given the task instance's next_method and next_kwargs (JSON text) as read
 * with it (a worker has them from starting the task instance): the operator's resumeExecution().
 */
export function callNextMethod<Context extends TaskContext>(
  operator: BaseOperator<Context>,
  context: Context,
  nextMethod: string,
  nextKwargsJson: string | null,
): unknown {
  const kwargs = (nextKwargsJson === null ? {} : JSON.parse(nextKwargsJson)) as JsonObject;
  return operator.resumeExecution(context, nextMethod, kwargs);
}
