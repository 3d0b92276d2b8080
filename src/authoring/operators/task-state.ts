import { InvalidTaskStateError } from '../../vocabulary/errors.ts';
import { type JsonValue, toJsonText } from '../../vocabulary/serialization/json.ts';

/**
 * A task instance's durable state (`context.state`): JSON values by key, kept in deferflow's
 * database across the task instance's tries, deferrals and resumed methods, so that a try can
 * find what an earlier one did, such as the id of an external job it submitted, and re-attach to
 * it instead of doing it again. `deferflow tasks state` shows it; `deferflow tasks clear` deletes
 * it unless given `--keep-state`; it goes with its task instance (`db clean`).
 */
export interface TaskState {
  /** The value kept under `key`, or undefined when none is. */
  get<T extends JsonValue = JsonValue>(key: string): Promise<T | undefined>;
  /**
   * Keeps `value` (JSON, at most 64 KiB of it) under `key`, replacing what was there; it is
   * written when the promise resolves. Only the try that holds the task instance writes: one
   * that was retried or cleared meanwhile is refused with DF_TRY_TAKEN_OVER and writes nothing.
   */
  set(key: string, value: JsonValue): Promise<void>;
  /** Forgets `key` (nothing happens when none is kept), under the same rule as set(). */
  delete(key: string): Promise<void>;
}

/** The longest key (characters). */
export const MAX_TASK_STATE_KEY_LENGTH = 200;
/** The most JSON one value may take (bytes, UTF-8): state is for ids and cursors; large data belongs elsewhere. */
export const MAX_TASK_STATE_VALUE_BYTES = 64 * 1024;

/** How a task's state reaches the database: the worker's, whether the task runs in it or in a task runner. */
export interface TaskStateServices {
  /** The JSON text kept under `key`, or null. */
  readTaskState(key: string): Promise<string | null>;
  /** Keeps JSON text under `key`, or deletes it (null); throws DF_TRY_TAKEN_OVER for a try that no longer holds its task instance. */
  writeTaskState(key: string, json: string | null): Promise<void>;
}

/** `context.state` over `services`; keys and values are checked here, in the task's own process, so the error's stack is the task's. */
export function taskState(services: TaskStateServices): TaskState {
  return {
    async get<T extends JsonValue = JsonValue>(key: string): Promise<T | undefined> {
      checkKey(key, 'get');
      const json = await services.readTaskState(key);
      return json === null ? undefined : (JSON.parse(json) as T);
    },
    async set(key: string, value: JsonValue): Promise<void> {
      checkKey(key, 'set');
      const json = toJsonText(value, `context.state.set(${JSON.stringify(key)}, value)`);
      const bytes = Buffer.byteLength(json);
      if (bytes > MAX_TASK_STATE_VALUE_BYTES) {
        throw new InvalidTaskStateError(
          `context.state.set(${JSON.stringify(key)}, value): the value is ${bytes} bytes of JSON; a key keeps at most ${MAX_TASK_STATE_VALUE_BYTES} (keep large data elsewhere and its location here)`,
        );
      }
      await services.writeTaskState(key, json);
    },
    async delete(key: string): Promise<void> {
      checkKey(key, 'delete');
      await services.writeTaskState(key, null);
    },
  };
}

function checkKey(key: unknown, method: string): asserts key is string {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_TASK_STATE_KEY_LENGTH) {
    const got = typeof key === 'string' ? `${key.length} characters` : typeof key;
    throw new InvalidTaskStateError(`context.state.${method}(key): a key is a string of 1 to ${MAX_TASK_STATE_KEY_LENGTH} characters, got ${got}`);
  }
}
