import { storableText } from './serialization/storable-text.ts';

/**
 * Every error deferflow raises on purpose lives here, each with a stable `code` (what scripts,
 * logs and tests match on; messages may be reworded, codes never). Failure markers and error log
 * lines carry the code as a field. The README's "Error codes" table says when each is raised; a
 * test keeps it to exactly ERROR_CODES.
 */

export const ERROR_CODES = [
  'DF_INVALID_OPTION',
  'DF_INVALID_DATABASE_URL',
  'DF_DATABASE_NOT_MIGRATED',
  'DF_NOT_JSON',
  'DF_NOT_STORABLE',
  'DF_INVALID_TRIGGER_ARGUMENT',
  'DF_UNKNOWN_TRIGGER',
  'DF_TRIGGER_MODULE',
  'DF_TRIGGER_FAILED',
  'DF_UPSTREAM_OVERFLOW',
  'DF_OUTCOME_REFUSED',
  'DF_DATABASE',
  'DF_TASK_DEFERRAL',
  'DF_TASK_DEFERRAL_TIMEOUT',
  'DF_DEFERRAL_STRANDED',
  'DF_TASK_INSTANCE_STATE',
  'DF_INVALID_TASK_INSTANCE',
  'DF_UNKNOWN_NEXT_METHOD',
  'DF_TASK_FAILED',
  'DF_TASK_EXECUTION_TIMEOUT',
  'DF_INVALID_DAG',
  'DF_INVALID_SERIALIZED_DAG',
  'DF_RETURN_VALUE_TOO_LARGE',
  'DF_INVALID_TASK_STATE',
  'DF_DAG_IMPORT',
  'DF_USER_CODE_EXIT',
  'DF_TASK_NOT_FOUND',
  'DF_NOT_IN_TASK_RUNNER',
  'DF_WORKER_STOPPING',
  'DF_TASK_STOPPED_BY_SIGNAL',
  'DF_TRY_TAKEN_OVER',
  'DF_LIFECYCLE',
  'DF_MIGRATION_FAILED',
  'DF_TRIGGER_RUNTIME',
  'DF_DAG_FOLDER',
  'DF_UNCAUGHT',
  'DF_SENSOR_TIMEOUT',
  'DF_INVALID_SENSOR',
  'DF_UNKNOWN_SENSOR',
  'DF_UNKNOWN_CONNECTION',
  'DF_EXTERNAL_TASK_FAILED',
  'DF_INVALID_SIGNAL',
  'DF_TRIGGER_BLOCKED',
  'DF_TRIGGER_QUARANTINED',
  'DF_TASK_CRASHED',
  'DF_ENCRYPTION_KEY',
  'DF_ENCRYPTION_KEY_MISMATCH',
  'DF_INVALID_INPUT_REQUEST',
  'DF_INVALID_INPUT_RESPONSE',
  'DF_INPUT_LINK_INVALID',
  'DF_INPUT_ALREADY_GIVEN',
  'DF_NOT_AWAITING_INPUT',
  'DF_INPUT_TIMEOUT',
  'DF_MISSING_PACKAGE',
] as const;

/** Every stable error code deferflow has (DF_…), each documented in docs/error-codes.md. */
export type DeferflowErrorCode = (typeof ERROR_CODES)[number];

/** Every error deferflow raises on purpose: a stable `code` and a message that says what was wrong and what to do. */
export class DeferflowError extends Error {
  /** The stable code (DF_…): documented in docs/error-codes.md. */
  readonly code: DeferflowErrorCode;

  constructor(code: DeferflowErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** An option (a flag, an environment variable or a config field) has a value it cannot take, or is not an option. */
export class InvalidOptionError extends DeferflowError {
  constructor(
    /** The option as the user named it: a flag (`poll-interval`) or a config field (`worker.pollInterval`). */
    readonly option: string,
    /** What is wrong with it, and what to give instead. */
    readonly reason: string,
  ) {
    super('DF_INVALID_OPTION', `${option}: ${reason}`);
  }

  /** The same refusal of the same option under the name the user gave it (a config field for a flag). */
  renamed(option: string): InvalidOptionError {
    return new InvalidOptionError(option, this.reason);
  }
}

/** A database URL that is neither sqlite:PATH nor postgres://…. */
export class InvalidDatabaseUrlError extends DeferflowError {
  constructor(url: string, why: string) {
    super('DF_INVALID_DATABASE_URL', `database URL ${JSON.stringify(url)}: ${why}`);
  }
}

/** A command found the database missing, unmigrated, behind or ahead of this deferflow. */
export class DatabaseNotMigratedError extends DeferflowError {
  constructor(message: string) {
    super('DF_DATABASE_NOT_MIGRATED', message);
  }
}

/** A value that must be JSON is not (a function, a cycle, a non-finite number …): where, and what. */
export class NotJsonError extends DeferflowError {
  /** `notAValue`: the value is JSON but of the wrong kind (an array where an object is needed): no list of JSON kinds follows. */
  constructor(
    /** Where in the value (e.g. `event.payload.rows[3]`). */
    readonly path: string,
    why: string,
    notAValue = true,
  ) {
    super(
      'DF_NOT_JSON',
      notAValue ? `${path}: ${why}; only JSON values (objects, arrays, strings, finite numbers, booleans, null) can be stored` : `${path}: ${why}`,
    );
  }
}

/** A JSON value holds text PostgreSQL refuses; refused on SQLite too, so both dialects agree. */
export class NotStorableError extends DeferflowError {
  constructor(
    /** Where in the value. */
    readonly path: string,
    why: string,
  ) {
    super('DF_NOT_STORABLE', `${path} ${why}; remove it, or encode the text (e.g. base64) before passing it`);
  }
}

/** A trigger's constructor refused its kwargs: what was wrong, and what to pass instead. */
export class InvalidTriggerArgumentError extends DeferflowError {
  constructor(trigger: string, message: string) {
    super('DF_INVALID_TRIGGER_ARGUMENT', `${trigger}: ${message}`);
  }
}

/** A trigger row names a classpath no registered trigger class has. */
export class UnknownTriggerError extends DeferflowError {
  constructor(
    /** The classpath the row names. */
    readonly classpath: string,
    allowed: readonly string[],
  ) {
    super(
      'DF_UNKNOWN_TRIGGER',
      `trigger classpath ${JSON.stringify(classpath)} is not allowed on this triggerer ` +
        `(allowed: ${allowed.join(', ') || 'none'}); load its module with --trigger-module`,
    );
  }
}

/** A trigger module (--trigger-module) could not be loaded, or defines no trigger class. */
export class TriggerModuleError extends DeferflowError {
  constructor(message: string, options?: ErrorOptions) {
    super('DF_TRIGGER_MODULE', message, options);
  }
}

/** A trigger failed (it threw, or ended without an event): its error and stack, handed to its task instances. */
export class TriggerFailedError extends DeferflowError {
  constructor(message: string, options?: ErrorOptions) {
    super('DF_TRIGGER_FAILED', message, options);
  }
}

/**
 * A trigger fell behind the shared upstream it reads (see UpstreamHub): more matching messages
 * waited for it than its queue holds. It fails alone; the reader and the other triggers go on.
 */
export class UpstreamOverflowError extends DeferflowError {
  constructor(upstream: string, capacity: number) {
    super(
      'DF_UPSTREAM_OVERFLOW',
      `the trigger fell behind its shared upstream ${upstream}: more than ${capacity} matching messages waited for it; ` +
        'take messages faster (hand them over in batches) or narrow its filter',
    );
  }
}

/** A trigger whose steps held triggerers' event loops past the watchdog's limit too often: never run again. */
export class TriggerQuarantinedError extends DeferflowError {
  constructor(message: string) {
    super('DF_TRIGGER_QUARANTINED', message);
  }
}

/**
 * Raised inside a resumed task (by resumeTaskInstance, or the worker resuming it) when the
 * trigger it waited on failed; its subclass TaskDeferralTimeout when the deferral timed out.
 * Catch it in the operator's code to handle a failed wait; left uncaught, the try fails with it.
 *
 * - `code`: DF_TASK_DEFERRAL (the trigger failed) or DF_TASK_DEFERRAL_TIMEOUT (it timed out).
 * - `message`: `the trigger failed [<triggerCode>]: <the trigger's error>`.
 * - `triggerCode`: what failed on the triggerer: DF_TRIGGER_FAILED (its run() threw or ended
 *   without an event), DF_UNKNOWN_TRIGGER (no triggerer allows its classpath),
 *   DF_INVALID_TRIGGER_ARGUMENT (its constructor refused the stored kwargs), DF_OUTCOME_REFUSED
 *   (the database refused its event), DF_TASK_DEFERRAL_TIMEOUT for a timeout.
 * - `triggerTraceback`: the stack of the trigger's error as the triggerer saw it, or null.
 * - `stack`: this error's message over the trigger's own frames (where it went wrong), not
 *   deferflow's frames that raised it in the task; as it was raised when the trigger's had none.
 */
export class TaskDeferralError extends DeferflowError {
  constructor(
    message: string,
    /** The stack of the trigger's error, as the triggerer saw it; null when there is none (a timeout). */
    readonly triggerTraceback: string | null = null,
    code: 'DF_TASK_DEFERRAL' | 'DF_TASK_DEFERRAL_TIMEOUT' = 'DF_TASK_DEFERRAL',
    /** The code of what failed on the triggerer (DF_TRIGGER_FAILED, DF_UNKNOWN_TRIGGER, …). */
    readonly triggerCode: DeferflowErrorCode | null = null,
  ) {
    super(code, message);
    const triggerFrames = triggerTraceback === null ? [] : stackFrames(triggerTraceback);
    if (triggerFrames.length > 0) this.stack = [`${this.name}: ${message}`, ...triggerFrames].join('\n');
  }
}

/** Whether a line of a stack is a frame (`    at …`) rather than its message. */
const isFrame = (line: string) => /^\s+at /.test(line);

/** The frame lines of a stack, without its message. */
function stackFrames(stack: string): string[] {
  return stack.split('\n').filter(isFrame);
}

/** Where deferflow's own modules are (src/ in a checkout, dist/src/ installed): the folder above this file's. */
const OWN_SOURCE_DIR = new URL('..', import.meta.url);

/**
 * A stack with deferflow's own frames (its modules and Node's internals) left out, so that what
 * is left is the user's code, innermost first: what a trigger's failure shows its task. Frames
 * of deferflow's built-in triggers stay when it runs from its sources (triggers/ is outside src/);
 * built, they are in its bundle with the rest. Unchanged if nothing but deferflow's frames is in
 * it: a built-in trigger's own failure keeps its whole stack.
 */
export function withoutDeferflowFrames(stack: string): string {
  const internal = (line: string) =>
    isFrame(line) && (line.includes(OWN_SOURCE_DIR.href) || line.includes(OWN_SOURCE_DIR.pathname) || /\(node:internal\/|at node:internal\//.test(line));
  const kept = stack.split('\n').filter((line) => !internal(line));
  return kept.some(isFrame) ? kept.join('\n') : stack;
}

/** Raised inside a resumed task when its deferral's timeout passed before the trigger fired. */
export class TaskDeferralTimeout extends TaskDeferralError {
  constructor(message: string) {
    super(message, null, 'DF_TASK_DEFERRAL_TIMEOUT', 'DF_TASK_DEFERRAL_TIMEOUT');
  }
}

/** A task instance is not in a state the call can act on. */
export class TaskInstanceStateError extends DeferflowError {
  constructor(message: string) {
    super('DF_TASK_INSTANCE_STATE', message);
  }
}

/** createTaskInstance was given a field it cannot store (named in the message). */
export class InvalidTaskInstanceError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_TASK_INSTANCE', `createTaskInstance: ${message}`);
  }
}

/** A deferral names a method the operator does not have. */
export class UnknownNextMethodError extends DeferflowError {
  constructor(operator: string, method: string) {
    super('DF_UNKNOWN_NEXT_METHOD', `operator ${operator} has no method ${JSON.stringify(method)} to resume at`);
  }
}

/** A task ran past its execution_timeout, which spans its deferrals too. */
export class TaskExecutionTimeoutError extends DeferflowError {
  constructor(task: string, deadline: number) {
    super('DF_TASK_EXECUTION_TIMEOUT', `${task} ran past its execution timeout (${new Date(deadline).toISOString()})`);
  }
}

/**
 * The process a task ran in (a task runner) ended while the task ran: process.exit(), an
 * uncaught exception, out of memory, a native crash. Only that try fails (retried if it may be).
 */
export class TaskCrashedError extends DeferflowError {
  constructor(task: string, how: string) {
    super('DF_TASK_CRASHED', `${task} crashed its task runner: ${how}; the worker and its other tasks carry on, and the runner is replaced`);
  }
}

/** A task's return value (kept per task instance, read downstream) is over the size kept. */
export class ReturnValueTooLargeError extends DeferflowError {
  constructor(task: string, bytes: number, limit: number) {
    super(
      'DF_RETURN_VALUE_TOO_LARGE',
      `${task} returned ${bytes} bytes of JSON; a task instance keeps at most ${limit} (store large results elsewhere and return where they are)`,
    );
  }
}

/** A task's durable state was given a key or value it cannot keep (context.state.set): the message names which, and why. */
export class InvalidTaskStateError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_TASK_STATE', message);
  }
}

/** A DAG or task definition is malformed; the message names the DAG and task. */
export class InvalidDagError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_DAG', message);
  }
}

/** A database operation failed in a way deferflow recognised (DF_DATABASE); retrying it may succeed. */
export class DatabaseError extends DeferflowError {
  constructor(message: string, options?: ErrorOptions) {
    super('DF_DATABASE', message, options);
  }
}

/**
 * Task code in a task runner process used a name of `deferflow` that must load the database code
 * synchronously (openDatabase, Deferflow): runners load the authoring API only.
 */
export class NotInTaskRunnerError extends DeferflowError {
  constructor(name: string) {
    super(
      'DF_NOT_IN_TASK_RUNNER',
      `${name} is not loaded in task runner processes, which load only deferflow's authoring API so that they start in milliseconds: ` +
        "reach deferflow's database through the task's context (context.sendSignal, context.latestSignalVersion, context.xcomPull, …), " +
        `or through a function of deferflow that returns a promise (it loads the rest on first use, after which ${name} is there too), ` +
        'or run the worker with --task-isolation none',
    );
  }
}

/** The worker cannot find a task's code: its DAG is not serialized, or its file no longer defines the DAG or the task. */
export class TaskNotFoundError extends DeferflowError {
  constructor(message: string) {
    super('DF_TASK_NOT_FOUND', message);
  }
}

/** The reason a running task's signal is aborted when its worker stops and hands the try back. */
export class WorkerStoppingError extends DeferflowError {
  constructor() {
    super('DF_WORKER_STOPPING', 'the worker is shutting down; this try is handed back and runs again');
  }
}

/** The reason a running task's signal is aborted when a signal action stops or restarts it. */
export class TaskStoppedBySignalError extends DeferflowError {
  /** What the signal asked of the running try. */
  readonly request: 'restart' | 'success' | 'failed' | 'skipped';

  constructor(request: 'restart' | 'success' | 'failed' | 'skipped') {
    super(
      'DF_TASK_STOPPED_BY_SIGNAL',
      request === 'restart' ? 'a signal restarts this task: this try is stopped and a new one runs' : `a signal stops this task: it ends ${request}`,
    );
    this.request = request;
  }
}

/**
 * The reason a running task's signal is aborted when its worker finds the try is no longer its
 * own: the scheduler retried it while the worker's heartbeat was stale (cut off from the
 * database, or paused), or it was cleared or deleted. Nothing more of that try is written.
 */
export class TryTakenOverError extends DeferflowError {
  constructor(label: string, tryNumber: number, now: string) {
    super(
      'DF_TRY_TAKEN_OVER',
      `${label}, try ${tryNumber}, is no longer this worker's (it is ${now}): its heartbeat went stale past the zombie threshold and the try was retried, or it was cleared; its code is stopped and nothing more of the try is written`,
    );
  }
}

/** A daemon (triggerer, worker, scheduler) asked to start when it is not new. */
export class LifecycleError extends DeferflowError {
  constructor(daemon: string, state: string, message = `${daemon} already ${state}: start() runs once; make a new ${daemon} to start again`) {
    super('DF_LIFECYCLE', message);
  }
}

/** A migration failed (the database is left as it was before it: migrations run in one transaction). */
export class MigrationFailedError extends DeferflowError {
  constructor(message: string, options?: ErrorOptions) {
    super('DF_MIGRATION_FAILED', message, options);
  }
}

/** A trigger used what only a triggerer lends it (this.log) outside one. */
export class TriggerRuntimeError extends DeferflowError {
  constructor(message: string) {
    super('DF_TRIGGER_RUNTIME', message);
  }
}

/** DAG processing refused a folder that holds none of the DAG files it processed before. */
export class DagFolderError extends DeferflowError {
  constructor(message: string) {
    super('DF_DAG_FOLDER', message);
  }
}

/** A serialized DAG read from the database does not have the shape this version writes. */
export class InvalidSerializedDagError extends DeferflowError {
  constructor(dagId: string, field: string, why: string) {
    super('DF_INVALID_SERIALIZED_DAG', `serialized DAG ${JSON.stringify(dagId)}: ${field} ${why}`);
  }
}

/** The stable code of anything thrown: its own when deferflow raised it, else `fallback`. */
export function codeOf(thrown: unknown, fallback: DeferflowErrorCode): DeferflowErrorCode {
  // By shape, not instanceof: a trigger module or DAG file may carry its own copy of deferflow.
  const code = typeof thrown === 'object' && thrown !== null ? (thrown as { code?: unknown }).code : undefined;
  return (ERROR_CODES as readonly unknown[]).includes(code) ? (code as DeferflowErrorCode) : fallback;
}

/** The fields every error log line carries: its stable code (see codeOf) and its text. */
export function errorFields(thrown: unknown, fallback: DeferflowErrorCode): { code: DeferflowErrorCode; error: string } {
  return { code: codeOf(thrown, fallback), error: describeThrown(thrown).error };
}

/**
 * The text and stack of anything thrown, for logs and the failure marker's next_kwargs; made
 * storable (U+0000 and lone surrogates become U+FFFD): an error message is deferflow's text
 * about a failure, and it must never be what stops the failure being recorded.
 */
export function describeThrown(thrown: unknown): { error: string; traceback: string | null } {
  const { error, traceback } = describeRaw(thrown);
  return { error: storableText(error), traceback: traceback === null ? null : storableText(traceback) };
}

function describeRaw(thrown: unknown): { error: string; traceback: string | null } {
  if (thrown instanceof Error) {
    return { error: `${thrown.name}: ${thrown.message}`, traceback: thrown.stack ?? null };
  }
  // An error-like object from another realm or loader, or anything else thrown.
  if (typeof thrown === 'object' && thrown !== null && typeof (thrown as { message?: unknown }).message === 'string') {
    const { name, message, stack } = thrown as { name?: unknown; message: string; stack?: unknown };
    return { error: `${typeof name === 'string' ? name : 'Error'}: ${message}`, traceback: typeof stack === 'string' ? stack : null };
  }
  if (typeof thrown === 'object' && thrown !== null) {
    try {
      return { error: JSON.stringify(thrown), traceback: null };
    } catch {
      // not serializable: fall through
    }
  }
  return { error: String(thrown), traceback: null };
}

/** A sensor's options or poke context cannot work (named in the message): refused where it is made or deferred. */
export class InvalidSensorError extends DeferflowError {
  constructor(sensor: string, message: string) {
    super('DF_INVALID_SENSOR', `${sensor}: ${message}`);
  }
}

/** A consolidated sensor trigger names a sensor class this triggerer does not allow. */
export class UnknownSensorError extends DeferflowError {
  constructor(classpath: string, allowed: readonly string[]) {
    super(
      'DF_UNKNOWN_SENSOR',
      `sensor class ${JSON.stringify(classpath)} is not allowed on this triggerer (allowed: ${allowed.length === 0 ? 'none' : allowed.join(', ')}); ` +
        'load the module that exports it with --trigger-module (DEFERFLOW_TRIGGER_MODULES)',
    );
  }
}

/** A named connection is not defined (DEFERFLOW_CONN_<NAME>), or its name is not one. */
export class UnknownConnectionError extends DeferflowError {
  constructor(message: string) {
    super('DF_UNKNOWN_CONNECTION', message);
  }
}

/** A signal's key is not one, or its value is not JSON or too large (named in the message). */
export class InvalidSignalError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_SIGNAL', message);
  }
}

/**
 * A value encrypted at rest cannot be read: the key it was sealed with is not configured, or it
 * does not open with the key of that id. Only the row's own task instances fail.
 */
export class EncryptionKeyError extends DeferflowError {
  constructor(message: string) {
    super('DF_ENCRYPTION_KEY', message);
  }
}

/**
 * A user file (a DAG file, a trigger module) called process.exit() while it loaded: it would have
 * ended the daemon loading it. The call throws this instead, and the file fails to load with it.
 */
export class UserCodeExitError extends DeferflowError {
  constructor(file: string, code: unknown) {
    super(
      'DF_USER_CODE_EXIT',
      `${file} called process.exit(${code === undefined ? '' : JSON.stringify(code)}) while it loaded: a DAG file or trigger module must not end ` +
        'the process that loads it. A script in the DAG folder? Move it out, or start its name with _ so that it is skipped',
    );
  }
}

/** A DAG asked for by id whose file failed to import (the message names the file and its error). */
export class DagImportError extends DeferflowError {
  constructor(message: string) {
    super('DF_DAG_IMPORT', message);
  }
}

/**
 * A key whose id the database knows under other key material (a pasted wrong key, another
 * environment's keys file): refused at start, before the process seals anything with it.
 */
export class EncryptionKeyMismatchError extends DeferflowError {
  constructor(
    /** The key id refused. */
    readonly keyId: string,
    why: string,
  ) {
    super(
      'DF_ENCRYPTION_KEY_MISMATCH',
      `encryption key ${keyId} is not the key this database knows by that id: ${why}; nothing was written. ` +
        `Check that DEFERFLOW_ENCRYPTION_KEYS (or the keys file) holds the same ${keyId} as every other process of this deployment, ` +
        'or give a new key a new id (`deferflow db generate-key --id ID`)',
    );
  }
}

/** awaitInput() (or a human-input operator) was given a question it cannot ask: the message names the field. */
export class InvalidInputRequestError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_INPUT_REQUEST', message);
  }
}

/** A response does not answer the question asked (an option it does not offer, a field missing or of the wrong type); nothing was recorded. */
export class InvalidInputResponseError extends DeferflowError {
  constructor(message: string) {
    super('DF_INVALID_INPUT_RESPONSE', message);
  }
}

/**
 * A human-input link was refused: its signature does not match (tampered or made with another
 * secret), it expired, or it was made for a question that is no longer asked (an older try, a
 * cleared or marked task instance). Nothing was recorded.
 */
export class InputLinkInvalidError extends DeferflowError {
  constructor(
    message: string,
    /** Why: the signature, the expiry, or a question no longer asked. */
    readonly reason: 'signature' | 'expired' | 'stale',
  ) {
    super('DF_INPUT_LINK_INVALID', message);
  }
}

/** The question was answered already: the first response wins; this one names who gave it and when. Nothing was recorded. */
export class InputAlreadyGivenError extends DeferflowError {
  constructor(
    message: string,
    /** Who gave the response that won. */
    readonly respondedBy: string,
    /** When (epoch ms). */
    readonly respondedAt: number,
  ) {
    super('DF_INPUT_ALREADY_GIVEN', message);
  }
}

/** A response was given for a task instance that is not awaiting input (never asked, cleared, ended). */
export class NotAwaitingInputError extends DeferflowError {
  constructor(message: string) {
    super('DF_NOT_AWAITING_INPUT', message);
  }
}

/** Raised inside a resumed task whose question timed out with no defaults to answer it. */
export class InputTimeoutError extends DeferflowError {
  constructor(message: string) {
    super('DF_INPUT_TIMEOUT', message);
  }
}

/** A feature needs a package only some users install (a message broker's client), and it is not installed. */
export class MissingPackageError extends DeferflowError {
  constructor(
    /** The package to install, or the packages (all those missing, named at once). */
    readonly packageName: string | readonly string[],
    /** What needs it (a trigger class). */
    readonly neededBy: string,
  ) {
    const names = typeof packageName === 'string' ? [packageName] : packageName;
    super(
      'DF_MISSING_PACKAGE',
      names.length === 1
        ? `${neededBy} needs the package ${names[0]}, which is not installed: run \`npm install ${names[0]}\` in your project`
        : `${neededBy} needs the packages ${names.join(', ')}, which are not installed: run \`npm install ${names.join(' ')}\` in your project`,
    );
  }
}
