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
  // A person is asked a question (human input): no worker slot, no trigger row (migration 0016).
  'awaiting_input',
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
  /** The row's id. */
  id: Generated<number>;
  /** The trigger class, by classpath (the triggerer allows only registered ones). */
  classpath: string;
  /** Its constructor kwargs as JSON (sealed when encryption is on). */
  kwargs: SealableJson;
  /** When the row was written. */
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
  /** The queue of the task instances waiting on it (migration 0017): only triggerers serving it claim it. */
  queue: Generated<string>;
  /** 1: a watcher (migration 0018), run while a DAG watches it (dag_watcher), each event making DAG runs; 0: a wait, done at its first event. */
  watcher: Generated<number>;
  /** A watcher's durable position (JSON), written with the runs its events made; null before its first. */
  cursor: JsonText | null;
  /** When a watcher's events last made runs. */
  last_event_at: NullableDbTime;
}

/** dag_watcher: which DAG is scheduled on which watcher trigger row (migration 0018). */
export interface DagWatcherTable {
  dag_id: string;
  trigger_id: number;
}

/** The task_instance table: one row per task of each DAG run, its state and its deferral. */
export interface TaskInstanceTable {
  /** The row's id. */
  id: Generated<number>;
  /** The DAG's id. */
  dag_id: string;
  /** The task's id. */
  task_id: string;
  /** The DAG run's id. */
  run_id: string;
  /** The map index (-1: not a mapped task). */
  map_index: Generated<number>;
  /** The try it is on (0 before the first). */
  try_number: Generated<number>;
  /** Its state; null: no state yet. */
  state: TaskInstanceState | null;
  /** The method a deferred task resumes at (`__fail__`: the failure marker). */
  next_method: string | null;
  /** The kwargs that method gets (sealed when encryption is on). */
  next_kwargs: SealableJson | null;
  /** The event a trigger fired, for the resumed method's kwargs.event (migration 0009); kept apart from next_kwargs so either can be encrypted. */
  next_event: SealableJson | null;
  /** The trigger row it waits on while deferred. */
  trigger_id: number | null;
  /** When its deferral times out; null: never. */
  trigger_timeout: NullableDbTime;
  /** Higher is claimed first, by workers and (through its trigger) triggerers. */
  priority_weight: Generated<number>;
  /** When its current try started. */
  start_date: NullableDbTime;
  /** When it ended; null while it has not. */
  end_date: NullableDbTime;
  /** When the row last changed. */
  updated_at: NullableDbTime;
  /** The operator's class name, for people reading the row. */
  operator: string | null;
  /** Retries allowed: a try that fails while try_number <= max_tries is retried. */
  max_tries: Generated<number>;
  /** Earliest moment an up_for_retry or up_for_reschedule task instance may be scheduled again; awaiting_input: its question's deadline. */
  ready_at: NullableDbTime;
  /** When execution_timeout runs out, fixed at the first start (deferrals do not extend it). */
  execution_deadline: NullableDbTime;
  /** When a worker claimed it. */
  queued_at: NullableDbTime;
  /** The host of the worker that last ran it. */
  hostname: string | null;
  /** The process that last ran it. */
  pid: number | null;
  /** The job row of the worker running it; a stale heartbeat there makes it a zombie. */
  worker_job_id: number | null;
  /** The JSON value execute() returned (Airflow's XCom return value). */
  return_value: JsonText | null;
  /** Only while running: a signal asked to stop the try, ending in this state, or to run the task afresh (`restart`). */
  stop_request: Generated<StopRequest | null>;
  /** The task's queue (migration 0017): only workers serving it claim it. */
  queue: Generated<string>;
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
export type DagRunType = 'manual' | 'scheduled' | 'event';

/** The dag_run table: one row per DAG run. */
export interface DagRunTable {
  /** The row's id. */
  id: Generated<number>;
  /** The DAG's id. */
  dag_id: string;
  /** The DAG run's id. */
  run_id: string;
  /** How it was made: by hand (manual) or by its schedule (scheduled). */
  run_type: DagRunType;
  /** The moment the run is for. */
  logical_date: DbTime;
  /** The start of the data interval a scheduled run covers; null for a manual run. */
  data_interval_start: NullableDbTime;
  /** Its end. */
  data_interval_end: NullableDbTime;
  /** The run's state. */
  state: DagRunState;
  /** The run's conf (JSON text). */
  conf: JsonText;
  /** The serialized DAG version the run's task instances were made from. */
  dag_hash: string | null;
  /** When the run was made. */
  created_at: DbTime;
  /** When it started. */
  start_date: NullableDbTime;
  /** When it ended; null while it has not. */
  end_date: NullableDbTime;
  /** When the row last changed. */
  updated_at: DbTime;
}

/** The serialized_dag table: each DAG's structure as JSON, written by DAG processing and read by the scheduler. */
export interface SerializedDagTable {
  /** The DAG's id. */
  dag_id: string;
  /** The DAG file it comes from. */
  fileloc: string;
  /** The versioned JSON of the DAG (see src/authoring/dags/serialized-dag.ts). */
  data: JsonText;
  /** A hash of `data`: a change makes a new version. */
  hash: string;
  /** The version of the serialized form. */
  schema_version: number;
  /** When `data` last changed. */
  last_updated: DbTime;
  /** Set while the DAG's file (or the DAG in it) is gone. */
  deleted_at: NullableDbTime;
  /** 1: paused (migration 0018): no scheduled, signal or event runs, its watchers stopped. */
  paused: Generated<number>;
}

/** The import_error table: DAG files that failed to load, with why. */
export interface ImportErrorTable {
  /** The row's id. */
  id: Generated<number>;
  /** The DAG file it comes from. */
  fileloc: string;
  /** Why it failed to load. */
  message: string;
  /** When it was recorded. */
  created_at: DbTime;
}

/** The task_log table: task instances' log lines, by try. */
export interface TaskLogTable {
  /** The row's id. */
  id: Generated<number>;
  /** The task instance's id. */
  task_instance_id: number;
  /** The try that logged it. */
  try_number: number;
  /** When the line was logged. */
  logged_at: DbTime;
  /** pino's level label: trace, debug, info, warn, error, fatal. */
  level: string;
  /** The text. */
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

/**
 * task_instance_history: a row each time a task instance is made or its state changes, written by
 * the database in the changing statement (migration 0019); db clean deletes it with its task instance.
 */
export interface TaskInstanceHistoryTable {
  /** The row's id: the order of the changes. */
  id: Generated<number>;
  /** The task instance's id. */
  task_instance_id: number;
  /** The try it was on. */
  try_number: number;
  /** The state it entered; null: none. */
  state: TaskInstanceState | null;
  /** When. */
  at: DbTime;
  /** While deferred: the trigger it waits on. */
  trigger_id: number | null;
  /** While queued or running: its worker's job. */
  worker_job_id: number | null;
}

/** Where an audited action came from: the status page, the CLI, or a signed input link. */
export const AUDIT_SOURCES = ['web', 'cli', 'link'] as const;
/** One of AUDIT_SOURCES. */
export type AuditSource = (typeof AUDIT_SOURCES)[number];

/** audit_log: each action a person took (migration 0020); db clean prunes it by age. */
export interface AuditLogTable {
  /** The row's id: the order of the actions. */
  id: Generated<number>;
  /** When. */
  at: DbTime;
  /** Who: the name given with the operator token, or a CLI's OS user. */
  actor: string;
  /** Where the action came from. */
  source: AuditSource;
  /** From where: the web client's address, or the CLI's host. */
  address: string | null;
  /** What: trigger_run, clear, mark_success, mark_failed, pause, unpause, signal, respond. */
  action: string;
  /** The DAG acted on, if any. */
  dag_id: string | null;
  /** The DAG run acted on, if any. */
  run_id: string | null;
  /** The task instance acted on, if any. */
  task_instance_id: number | null;
  /** The action's own figures, as JSON text. */
  details: string;
  /** What came of it, in words. */
  outcome: string;
}

/** daemon_sample: the figures a daemon records of itself every sample interval (migration 0021), for the status page's charts. */
export interface DaemonSampleTable {
  /** The row's id. */
  id: Generated<number>;
  /** The daemon's job. */
  job_id: number;
  /** Its job type (TriggererJob, WorkerJob, SchedulerJob). */
  job_type: string;
  /** When. */
  at: DbTime;
  /** The figures, a JSON object of numbers (see services/observability/daemon-samples.ts). */
  figures: string;
}

/** The task_reschedule table: each reschedule of a sensor's try. */
export interface TaskRescheduleTable {
  /** The row's id. */
  id: Generated<number>;
  /** The task instance's id. */
  task_instance_id: number;
  /** The try the run belonged to (a reschedule gives the try back: the next run has the same number). */
  try_number: number;
  /** When the run (a sensor's poke) started and ended. */
  start_date: DbTime;
  /** When the run (the poke) ended. */
  end_date: DbTime;
  /** When the task instance may run again. */
  reschedule_date: DbTime;
}

/** The task_state table: a task instance's durable state, JSON values by key kept across its tries (context.state). */
export interface TaskStateTable {
  /** The row's id. */
  id: Generated<number>;
  /** The task instance's id. */
  task_instance_id: number;
  /** The key the task gave. */
  key: string;
  /** The JSON value (sealed when encryption is on). */
  value: SealableJson;
  /** The try that last wrote it. */
  try_number: number;
  /** When it was last written. */
  updated_at: DbTime;
}

/** The trigger_member table: the leaf members of composite waits (anyOf, allOf), with each one's outcome once it fired. */
export interface TriggerMemberTable {
  /** The row's id. */
  id: Generated<number>;
  /** The composite's trigger row. */
  composite_id: number;
  /** The leaf's place in the composite's tree, depth first from 0. */
  member_index: number;
  /** The member's trigger row. */
  member_id: number;
  /** What the member yielded (sealed when encryption is on); null until it fires. */
  outcome: SealableJson | null;
  /** When it fired. */
  fired_at: NullableDbTime;
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
  /** Who sent it (see migration 0022); null: not recorded (sent before it). */
  sent_by: ColumnType<string | null, string | null | undefined, string | null>;
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
  /** The row's id. */
  id: Generated<number>;
  /** TriggererJob, WorkerJob or SchedulerJob. */
  job_type: string;
  /** running while the daemon lives; success or failed once it ended. */
  state: JobState;
  /** The host it runs (or ran) on. */
  hostname: string;
  /** The process id. */
  pid: number;
  /** A triggerer's capacity or a worker's slots; null for a scheduler. */
  capacity: number | null;
  /** When the daemon started. */
  start_date: DbTime;
  /** When it ended; null while it has not. */
  end_date: NullableDbTime;
  /** Its last heartbeat: a stale one means it is dead. */
  latest_heartbeat: DbTime;
  /**
   * What it holds for its life so peers know at once when its process is gone (see
   * liveness-locks.ts): 'pg-advisory', or 'file:<path>'; null: only its heartbeat tells.
   */
  liveness_lock: Generated<string | null>;
  /** The queues a worker or triggerer serves, comma-separated as --queues takes them (migration 0017); null: a scheduler, or a daemon from before queues (`default`). */
  queues: string | null;
}

/** task_input: the question a task instance asks a person, and the response that won (migration 0016). */
export interface TaskInputTable {
  /** The task instance asking: one question at a time each. */
  task_instance_id: number;
  /** The try that asked it: a link names it, and one made for another try is refused. */
  try_number: number;
  /** Random, new with each question: a link carries it, so a link for a replaced question is refused. */
  nonce: string;
  /** The question (model/human-input.ts InputQuestion) as JSON. */
  question: JsonText;
  /** When it was asked. */
  asked_at: DbTime;
  /** When the defaults apply (or the task fails); null: no timeout. */
  timeout_at: NullableDbTime;
  /** When the response that won came; null while none has. */
  responded_at: NullableDbTime;
  /** Who gave it (`timeout` for the defaults). */
  responded_by: string | null;
  /** How it came: link, cli, http, api, page or timeout. */
  response_source: string | null;
  /** The response (InputResponse) as JSON (sealed when encryption is on). */
  response: SealableJson | null;
}

/** deferflow_secret: secrets deferflow makes for itself (the key that signs human-input links when none is configured). */
export interface SecretTable {
  /** What it is for (input_link_key). */
  name: string;
  /** The secret, base64url. */
  value: string;
  /** When it was made. */
  created_at: DbTime;
}

/** deferflow's tables, for `new Kysely<DatabaseSchema>(…)`. */
export interface DatabaseSchema {
  /** The trigger rows. */
  trigger: TriggerTable;
  /** The task instance rows. */
  task_instance: TaskInstanceTable;
  /** The daemons' job rows. */
  job: JobTable;
  /** The DAG runs. */
  dag_run: DagRunTable;
  /** The serialized DAGs. */
  serialized_dag: SerializedDagTable;
  /** DAG files that failed to load. */
  import_error: ImportErrorTable;
  /** Task instances' log lines. */
  task_log: TaskLogTable;
  /** Sensors' reschedules. */
  task_reschedule: TaskRescheduleTable;
  /** Task instances' state changes. */
  task_instance_history: TaskInstanceHistoryTable;
  /** What people did (the console's and the CLI's actions). */
  audit_log: AuditLogTable;
  /** The figures daemons record of themselves, for the charts. */
  daemon_sample: DaemonSampleTable;
  /** Task instances' durable state. */
  task_state: TaskStateTable;
  /** The members of composite waits. */
  trigger_member: TriggerMemberTable;
  /** The watchers DAGs are scheduled on. */
  dag_watcher: DagWatcherTable;
  /** Questions task instances ask people (human input). */
  task_input: TaskInputTable;
  /** Secrets deferflow made for itself. */
  deferflow_secret: SecretTable;
  /** Each signal key's latest version. */
  signal_key: SignalKeyTable;
  /** The signals sent. */
  signal: SignalTable;
  /** Which signal versions each task instance has acted on. */
  task_instance_signal: TaskInstanceSignalTable;
  /** Where signal-scheduled DAGs start counting versions. */
  dag_signal_start: DagSignalStartTable;
  /** Triggers' log lines. */
  trigger_log: TriggerLogTable;
  /** Which trigger each try waited on. */
  trigger_wait: TriggerWaitTable;
  /** The encryption keys' check values. */
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
