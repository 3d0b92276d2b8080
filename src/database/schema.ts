import type { ColumnType, Generated } from 'kysely';
import type { StoredValue } from './encryption/keyring.ts';

/**
 * The tables, named after Airflow's so its users feel at home.
 *
 * Two conventions keep every query dialect-free:
 * - JSON columns (jsonb on PostgreSQL, text on SQLite) are written and read as JSON text;
 *   the PostgreSQL pool is told to hand jsonb back unparsed (see connect.ts).
 * - Time columns (timestamptz on PostgreSQL, ISO-8601 UTC text on SQLite) are written as
 *   `toDbTime(ms)` strings, which both compare correctly, and read through `fromDbTime`.
 */
export type DbTime = ColumnType<Date | string, string, string>;
export type NullableDbTime = ColumnType<Date | string | null, string | null, string | null>;
export type JsonText = string;
/**
 * A JSON column that may hold a secret: JSON text, or, sealed on SQLite, the sealed bytes (a blob;
 * see encryption/keyring.ts). Read through Keyring.open.
 */
export type SealableJson = StoredValue;

/** Every state a task instance can be in (Airflow's), in the order of a try's life. */
export const TASK_INSTANCE_STATES = [
  'scheduled',
  'queued',
  'running',
  'deferred',
  'success',
  'failed',
  'up_for_retry',
  'up_for_reschedule',
  'skipped',
  // Never ran: an upstream it needed failed (its trigger rule can no longer be met).
  'upstream_failed',
] as const;
/** A task instance's state (Airflow's), null being "no state" yet. */
export type TaskInstanceState = (typeof TASK_INSTANCE_STATES)[number];

/** The trigger table: one row per distinct wait, owned by the triggerer running it. */
export interface TriggerTable {
  id: Generated<number>;
  classpath: string;
  kwargs: SealableJson;
  created_at: DbTime;
  /** The job id of the triggerer that owns (runs) this trigger; null while unowned. */
  triggerer_id: number | null;
  /** sha256 of the canonical {classpath, kwargs}: identical waits share one row. Null opts out. */
  hash: string | null;
  /** The highest priority_weight of the task instances waiting on it: claimed first. */
  priority_weight: Generated<number>;
  /** Times its step held a triggerer's loop past the watchdog's limit (migration 0008). */
  culprit_count: Generated<number>;
  /** Set once culprit_count reached the quarantine limit: never claimed again. */
  quarantined_at: DbTime | null;
}

/** The task_instance table: one row per task of each DAG run, its state and its deferral. */
export interface TaskInstanceTable {
  id: Generated<number>;
  dag_id: string;
  task_id: string;
  run_id: string;
  map_index: Generated<number>;
  try_number: Generated<number>;
  state: TaskInstanceState | null;
  next_method: string | null;
  next_kwargs: SealableJson | null;
  /** The event a trigger fired, for the resumed method's kwargs.event (migration 0009); kept apart from next_kwargs so either can be encrypted. */
  next_event: SealableJson | null;
  trigger_id: number | null;
  trigger_timeout: NullableDbTime;
  priority_weight: Generated<number>;
  start_date: NullableDbTime;
  end_date: NullableDbTime;
  updated_at: NullableDbTime;
  /** The operator's class name, for people reading the row. */
  operator: string | null;
  /** Retries allowed: a try that fails while try_number <= max_tries is retried. */
  max_tries: Generated<number>;
  /** Earliest moment an up_for_retry or up_for_reschedule task instance may be scheduled again. */
  ready_at: NullableDbTime;
  /** When execution_timeout runs out, fixed at the first start (deferrals do not extend it). */
  execution_deadline: NullableDbTime;
  queued_at: NullableDbTime;
  hostname: string | null;
  pid: number | null;
  /** The job row of the worker running it; a stale heartbeat there makes it a zombie. */
  worker_job_id: number | null;
  /** The JSON value execute() returned (Airflow's XCom return value). */
  return_value: JsonText | null;
  /** Only while running: a signal asked to stop the try, ending in this state, or to run the task afresh (`restart`). */
  stop_request: Generated<StopRequest | null>;
}

/** What a signal asks of a running try: a fresh try (`restart`), or to end in a state (`stop`). */
export type StopRequest = 'restart' | 'success' | 'failed' | 'skipped';

export interface TaskInstanceSignalTable {
  task_instance_id: number;
  signal_key: string;
  /** The key's version the task's signal action last took into account (0: none sent when its run was created). */
  version: ColumnType<number | string, number, number>;
  /** The version that last started, restarted or stopped it; null while none has. */
  acted_version: ColumnType<number | string | null, number | null | undefined, number | null>;
}

/** Every state a DAG run can be in. */
export const DAG_RUN_STATES = ['queued', 'running', 'success', 'failed'] as const;
/** A DAG run's state. */
export type DagRunState = (typeof DAG_RUN_STATES)[number];
export type DagRunType = 'manual' | 'scheduled';

/** The dag_run table: one row per DAG run. */
export interface DagRunTable {
  id: Generated<number>;
  dag_id: string;
  run_id: string;
  run_type: DagRunType;
  logical_date: DbTime;
  data_interval_start: NullableDbTime;
  data_interval_end: NullableDbTime;
  state: DagRunState;
  conf: JsonText;
  /** The serialized DAG version the run's task instances were made from. */
  dag_hash: string | null;
  created_at: DbTime;
  start_date: NullableDbTime;
  end_date: NullableDbTime;
  updated_at: DbTime;
}

/** The serialized_dag table: each DAG's structure as JSON, written by DAG processing and read by the scheduler. */
export interface SerializedDagTable {
  dag_id: string;
  fileloc: string;
  /** The versioned JSON of the DAG (see src/authoring/dags/serialized-dag.ts). */
  data: JsonText;
  hash: string;
  schema_version: number;
  last_updated: DbTime;
  /** Set while the DAG's file (or the DAG in it) is gone. */
  deleted_at: NullableDbTime;
}

/** The import_error table: DAG files that failed to load, with why. */
export interface ImportErrorTable {
  id: Generated<number>;
  fileloc: string;
  message: string;
  created_at: DbTime;
}

/** The task_log table: task instances' log lines, by try. */
export interface TaskLogTable {
  id: Generated<number>;
  task_instance_id: number;
  try_number: number;
  logged_at: DbTime;
  /** pino's level label: trace, debug, info, warn, error, fatal. */
  level: string;
  message: string;
  /** The line's other structured fields, as JSON text; null when none. */
  fields: JsonText | null;
}

/** What a trigger logged (migration 0007): once per trigger, however many task instances share it. */
export interface TriggerLogTable {
  id: Generated<number>;
  trigger_id: number;
  logged_at: DbTime;
  level: string;
  message: string;
  fields: JsonText | null;
}

/**
 * The key material each encryption key id stands for, as a check value (migration 0011): an HMAC
 * of a fixed label under the key, never the key itself (see encryption/keyring.ts).
 */
export interface EncryptionKeyTable {
  key_id: string;
  check_value: string;
  recorded_at: DbTime;
}

/** Which trigger a try of a task instance waited on, and since when (migration 0007). */
export interface TriggerWaitTable {
  task_instance_id: number;
  try_number: number;
  trigger_id: number;
  waited_from: DbTime;
}

/** The task_reschedule table: each reschedule of a sensor's try. */
export interface TaskRescheduleTable {
  id: Generated<number>;
  task_instance_id: number;
  /** The try the run belonged to (a reschedule gives the try back: the next run has the same number). */
  try_number: number;
  /** When the run (a sensor's poke) started and ended. */
  start_date: DbTime;
  end_date: DbTime;
  /** When the task instance may run again. */
  reschedule_date: DbTime;
}

export interface SignalKeyTable {
  key: string;
  /** The latest version sent on the key (the first send is 1). */
  version: ColumnType<number | string, number, number>;
  updated_at: DbTime;
}

export interface SignalTable {
  key: string;
  version: ColumnType<number | string, number, number>;
  value: JsonText;
  sent_at: DbTime;
}

export interface DagSignalStartTable {
  dag_id: string;
  signal_key: string;
  /** The version its signal runs start after, before it has any. */
  after_version: ColumnType<number | string, number, number>;
}

export const TRIGGERER_JOB_TYPE = 'TriggererJob';
export const WORKER_JOB_TYPE = 'WorkerJob';
export const SCHEDULER_JOB_TYPE = 'SchedulerJob';
export type JobState = 'running' | 'success' | 'failed';

/** The job table: one row per daemon run (triggerer, worker, scheduler), with its heartbeat. */
export interface JobTable {
  id: Generated<number>;
  job_type: string;
  state: JobState;
  hostname: string;
  pid: number;
  capacity: number | null;
  start_date: DbTime;
  end_date: NullableDbTime;
  latest_heartbeat: DbTime;
}

/** deferflow's tables, for `new Kysely<DatabaseSchema>(…)`. */
export interface DatabaseSchema {
  trigger: TriggerTable;
  task_instance: TaskInstanceTable;
  job: JobTable;
  dag_run: DagRunTable;
  serialized_dag: SerializedDagTable;
  import_error: ImportErrorTable;
  task_log: TaskLogTable;
  task_reschedule: TaskRescheduleTable;
  signal_key: SignalKeyTable;
  signal: SignalTable;
  task_instance_signal: TaskInstanceSignalTable;
  dag_signal_start: DagSignalStartTable;
  trigger_log: TriggerLogTable;
  trigger_wait: TriggerWaitTable;
  encryption_key: EncryptionKeyTable;
}

/** A time (epoch milliseconds) as a time column stores it. */
export function toDbTime(epochMs: number): string {
  return new Date(epochMs).toISOString();
}

/** A time column's value (a Date on PostgreSQL, ISO text on SQLite) as epoch milliseconds. */
export function fromDbTime(value: Date | string): number;
/** A time column's value as epoch milliseconds, or null for null. */
export function fromDbTime(value: Date | string | null): number | null;
export function fromDbTime(value: Date | string | null): number | null {
  if (value === null) return null;
  return value instanceof Date ? value.getTime() : Date.parse(value);
}
