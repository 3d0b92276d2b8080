import type { Database } from '../database/connect.ts';
import { fromDbTime, TASK_INSTANCE_STATES, type TaskInstanceState } from '../database/schema.ts';
import { InvalidTaskInstanceError, TaskInstanceStateError } from '../vocabulary/errors.ts';
import type { JsonObject, JsonValue } from '../vocabulary/serialization/json.ts';
import { openStores } from '../storage/index.ts';
import { checkQueue } from '../model/queues.ts';

/**
 * For code that runs operators itself, outside deferflow's worker: it creates the task instance
 * an operator's deferral is recorded on (deferTaskInstance), and reads it back to see where it
 * is. deferflow's own scheduler creates the task instances of DAG runs; do not create those here.
 */
export interface NewTaskInstanceFields {
  /** The DAG it belongs to (any text: no DAG of that id needs to exist). */
  readonly dagId: string;
  /** The task's id within the DAG. */
  readonly taskId: string;
  /** The run it belongs to (any text, e.g. your job's id). */
  readonly runId: string;
  /** Which copy of a mapped task. @default 0 */
  readonly mapIndex?: number;
  /**
   * Its state to begin with. `running` (the default) is what deferTaskInstance expects: the
   * operator is running in your code now. Its try starts (try number 1, start date now).
   * @default 'running'
   */
  readonly state?: TaskInstanceState;
  /** Claimed ahead of lower weights when triggerers are busy. @default 1 */
  readonly priorityWeight?: number;
  /** Retries allowed (used by deferflow's worker and scheduler only). @default 0 */
  readonly retries?: number;
  /** The operator's class name, for people reading the row. @default null */
  readonly operator?: string | null;
  /**
   * Its queue: only workers serving it claim it, and its deferrals' triggers go to triggerers
   * serving it (see docs/queues.md). @default 'default'
   */
  readonly queue?: string;
}

/** A task instance as read back: what a user checks. Times are Dates; JSON columns are parsed. */
export interface TaskInstance {
  /** The row's id. */
  readonly id: number;
  /** Its DAG's id. */
  readonly dagId: string;
  /** Its task's id. */
  readonly taskId: string;
  /** Its DAG run's id. */
  readonly runId: string;
  /** Its map index (-1: not mapped). */
  readonly mapIndex: number;
  /** null: not yet scheduled (a DAG run's task instance waiting for its upstream tasks). */
  readonly state: TaskInstanceState | null;
  /** The try it is on (0 before its first). */
  readonly tryNumber: number;
  /** The method a deferred task instance resumes at; `__fail__` after its trigger failed or timed out. */
  readonly nextMethod: string | null;
  /** The kwargs it resumes with; the trigger's event is under `event` once it fired. */
  readonly nextKwargs: JsonObject | null;
  /** The trigger row it waits on while deferred. */
  readonly triggerId: number | null;
  /** When its deferral times out, if it has a timeout. */
  readonly triggerTimeout: Date | null;
  /** What the task returned (its XCom return value), once it succeeded. */
  readonly returnValue: JsonValue | null;
  /** When its current try started. */
  readonly startDate: Date | null;
  /** When it finished. */
  readonly endDate: Date | null;
  /** Its queue (`default` when it names none). */
  readonly queue: string;
}

/** Creates a task instance and returns its id; DF_TASK_INSTANCE_STATE when one with that key exists. */
export async function createTaskInstance(database: Pick<Database, 'db' | 'adapter'>, fields: NewTaskInstanceFields): Promise<number> {
  const mapIndex = fields.mapIndex ?? 0;
  const state = fields.state ?? 'running';
  for (const [name, value] of [
    ['dagId', fields.dagId],
    ['taskId', fields.taskId],
    ['runId', fields.runId],
  ] as const) {
    if (typeof value !== 'string' || value === '') throw new InvalidTaskInstanceError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`);
  }
  if (!Number.isSafeInteger(mapIndex) || mapIndex < -1)
    throw new InvalidTaskInstanceError(`mapIndex must be an integer of -1 or more, got ${JSON.stringify(fields.mapIndex)}`);
  if (!(TASK_INSTANCE_STATES as readonly string[]).includes(state)) {
    throw new InvalidTaskInstanceError(`state must be one of ${TASK_INSTANCE_STATES.join(', ')}, got ${JSON.stringify(fields.state)}`);
  }
  const priorityWeight = fields.priorityWeight ?? 1;
  const retries = fields.retries ?? 0;
  if (!Number.isSafeInteger(priorityWeight))
    throw new InvalidTaskInstanceError(`priorityWeight must be an integer, got ${JSON.stringify(fields.priorityWeight)}`);
  if (!Number.isSafeInteger(retries) || retries < 0)
    throw new InvalidTaskInstanceError(`retries must be an integer of 0 or more, got ${JSON.stringify(fields.retries)}`);
  let queue: string;
  try {
    queue = checkQueue(fields.queue);
  } catch (error) {
    throw new InvalidTaskInstanceError((error as Error).message);
  }
  const key = { dagId: fields.dagId, taskId: fields.taskId, runId: fields.runId, mapIndex };
  const storage = openStores(database);
  const id = await storage.taskInstances.createTaskInstance({ ...key, state, priorityWeight, maxTries: retries, operator: fields.operator ?? null, queue });
  if (id !== null) return id;
  const existing = await storage.taskInstances.readTaskInstance(key);
  throw new TaskInstanceStateError(
    `task instance ${fields.dagId}.${fields.taskId} of run ${fields.runId} (map index ${mapIndex}) already exists (id ${existing?.id ?? '?'}, ${existing?.state ?? 'no state'}); read it with readTaskInstance`,
  );
}

/**
 * The task instance `id` as it is now; null when there is none. Its nextKwargs hold the event it
 * resumes with; they are decrypted with `database`'s keys (EncryptionKeyError when they cannot be).
 */
export async function readTaskInstance(
  database: Pick<Database, 'db' | 'adapter'> & Partial<Pick<Database, 'keyring'>>,
  id: number,
): Promise<TaskInstance | null> {
  const storage = openStores(database);
  const row = await storage.taskInstances.readTaskInstance({ id });
  if (!row) return null;
  // The event is part of the kwargs only while a resume is due (see startTaskInstance).
  const nextKwargs = storage.taskInstances.openNextKwargs(id, row.next_kwargs, row.next_method === null ? null : row.next_event);
  if (nextKwargs.unreadable) throw nextKwargs.unreadable;
  const date = (value: Date | string | null) => (value === null ? null : new Date(fromDbTime(value)));
  return {
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    runId: row.run_id,
    mapIndex: row.map_index,
    state: row.state,
    tryNumber: row.try_number,
    nextMethod: row.next_method,
    nextKwargs: nextKwargs.json === null ? null : (JSON.parse(nextKwargs.json) as JsonObject),
    triggerId: row.trigger_id,
    triggerTimeout: date(row.trigger_timeout),
    returnValue: row.return_value === null ? null : (JSON.parse(row.return_value) as JsonValue),
    startDate: date(row.start_date),
    endDate: date(row.end_date),
    queue: row.queue,
  };
}
