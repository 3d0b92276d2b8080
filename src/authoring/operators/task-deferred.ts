import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { assertJsonObject, type JsonObject } from '../../vocabulary/serialization/json.ts';
import { durationToMs, type DurationInput } from '../../vocabulary/time/duration.ts';
import { isTriggerClass, triggerHash, type BaseTrigger, type SerializedTrigger } from '../triggers/base-trigger.ts';

/** What defer() is asked: the trigger, the method to resume at, its kwargs (JSON) and an optional timeout. */
export interface DeferralRequest {
  /** What to wait for. */
  readonly trigger: BaseTrigger;
  /** The operator method the task resumes at, called as method(context, event, kwargs). */
  readonly method: string;
  /** JSON kwargs handed back to that method (the key `event` is reserved for the event). */
  readonly kwargs?: JsonObject;
  /** Fail the task with TaskDeferralTimeout if the trigger has not fired by then (Duration or seconds). */
  readonly timeout?: DurationInput | null;
  /**
   * Share one trigger row with identical waits (same classpath and kwargs) that have not fired
   * yet. Default true; turn off for a trigger whose run has side effects per task.
   */
  readonly deduplicate?: boolean;
}

/**
 * Thrown by BaseOperator.defer(): the task gives its worker slot back and waits on a trigger.
 * Everything is checked and serialized here, so a non-JSON kwarg fails in the operator's own
 * stack, at the defer() call, not later on the triggerer.
 */
// A registered symbol, not instanceof: an operator from a DAG file loaded as CommonJS throws
// its own copy of this class.
const TASK_DEFERRED_BRAND = Symbol.for('deferflow.TaskDeferred');

/** Whether `thrown` is a TaskDeferred, from this copy of deferflow or another. */
export function isTaskDeferred(thrown: unknown): thrown is TaskDeferred {
  return typeof thrown === 'object' && thrown !== null && (thrown as Record<symbol, unknown>)[TASK_DEFERRED_BRAND] === true;
}

/** What BaseOperator.defer() throws: the trigger to wait on, the method to resume at, its kwargs and the deferral's timeout, checked where defer() was called. */
export class TaskDeferred extends Error {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [TASK_DEFERRED_BRAND] = true;
  /** The trigger to wait on. */
  readonly trigger: BaseTrigger;
  /** The trigger as stored: its classpath and kwargs. */
  readonly serializedTrigger: SerializedTrigger;
  /** sha256 of the canonical {classpath, kwargs}; null when deduplication is off. */
  readonly triggerHash: string | null;
  /** The method the task resumes at. */
  readonly method: string;
  /** The kwargs that method is given (the event is added under `event`). */
  readonly kwargs: JsonObject;
  /** How long the wait may last, in ms; null: no limit. */
  readonly timeoutMs: number | null;

  constructor(request: DeferralRequest) {
    super(`task deferred to ${request.method} on a trigger`);
    this.name = 'TaskDeferred';
    if (!request.trigger || !isTriggerClass(request.trigger.constructor)) {
      throw new InvalidOptionError('defer.trigger', 'expected an instance of a BaseTrigger subclass');
    }
    if (typeof request.method !== 'string' || request.method === '') {
      throw new InvalidOptionError('defer.method', 'expected the name of the operator method to resume at');
    }
    const kwargs = request.kwargs ?? {};
    assertJsonObject(kwargs, 'next_kwargs');
    if (Object.hasOwn(kwargs, 'event')) {
      throw new InvalidOptionError('defer.kwargs', 'the key "event" is reserved for the trigger event');
    }
    const serialized = request.trigger.serialize();
    if (typeof serialized?.classpath !== 'string' || serialized.classpath === '') {
      throw new InvalidOptionError(`${request.trigger.constructor.name}.serialize()`, 'must return a non-empty classpath');
    }
    assertJsonObject(serialized.kwargs, `${serialized.classpath} kwargs`);
    this.trigger = request.trigger;
    this.serializedTrigger = { classpath: serialized.classpath, kwargs: serialized.kwargs };
    this.triggerHash = request.deduplicate === false ? null : triggerHash(this.serializedTrigger);
    this.method = request.method;
    this.kwargs = kwargs;
    this.timeoutMs = request.timeout === undefined || request.timeout === null ? null : durationToMs(request.timeout, 'defer.timeout');
  }
}
