import type { JsonValue } from '../../vocabulary/serialization/json.ts';

/** What a trigger yields: its payload reaches every waiting task instance as next_kwargs.event. */
export class TriggerEvent<Payload extends JsonValue = JsonValue> {
  /** The event's payload (JSON): what the resumed method gets as `event`. */
  readonly payload: Payload;

  constructor(payload: Payload) {
    this.payload = payload;
  }
}

/** The states an event can end its task instances in. */
export const TASK_END_STATES = ['success', 'failed', 'skipped'] as const;
/** How a TaskEndEvent ends its task instances: success, failed or skipped. */
export type TaskEndState = (typeof TASK_END_STATES)[number];

/**
 * An event that finishes its task instances itself (Airflow's TaskSuccessEvent and friends):
 * the triggerer moves them from deferred straight to `taskState`, and no worker resumes them.
 * Worth it when the wait *is* the task (a sensor, a remote job whose result is all that
 * matters): the task never takes a worker slot again.
 *
 * A `failed` end is final: retries are for tries a worker ran, and the trigger already decided.
 */
export class TaskEndEvent<Payload extends JsonValue = JsonValue> extends TriggerEvent<Payload> {
  constructor(
    /** How the event ends its task instances. */
    readonly taskState: TaskEndState,
    payload: Payload,
  ) {
    super(payload);
  }
}

/** Ends the task instances as success; `returnValue` becomes their return value (XCom). */
export class TaskSuccessEvent<ReturnValue extends JsonValue = JsonValue> extends TaskEndEvent<ReturnValue | null> {
  constructor(returnValue: ReturnValue | null = null) {
    super('success', returnValue);
  }
}

/** Ends the task instances as failed (no retry); `reason` is logged by the triggerer. */
export class TaskFailedEvent extends TaskEndEvent<{ reason: string }> {
  constructor(reason: string) {
    super('failed', { reason });
  }
}

/** Ends the task instances as skipped (downstream tasks follow their trigger rules). */
export class TaskSkippedEvent extends TaskEndEvent<{ reason: string } | null> {
  constructor(reason?: string) {
    super('skipped', reason === undefined ? null : { reason });
  }
}

/** One event a watcher hands over: its own key (a message id: the run id is made from it) and its payload. */
export interface WatchedEvent<Payload extends JsonValue = JsonValue> {
  /** Unique within the watcher's source (1 to 200 characters): a redelivered event has the same key and makes no second run. */
  readonly key: string;
  /** What the run gets, in its conf as `event.payload`. */
  readonly payload: Payload;
}

/**
 * What a watcher yields (a trigger a DAG is scheduled on: see docs/events.md): events, each
 * making one run of every DAG watching, and the cursor after them, its position in its source
 * (JSON). The runs and the cursor are written in one transaction, and the yield returns only once
 * that has committed: acknowledge the events to their source after it (a crash before leaves
 * them to be delivered again, and their keys make no second run). A watcher taken over by
 * another triggerer starts again from the cursor written last (`this.cursor`).
 */
export class WatchEvents<Payload extends JsonValue = JsonValue> {
  constructor(
    /** The events, in their source's order (may be empty, to move the cursor only). */
    readonly events: readonly WatchedEvent<Payload>[],
    /** The position after them in the source (JSON), kept durably with their runs. */
    readonly cursor: JsonValue,
  ) {}
}
