import type { Selectable } from 'kysely';
import type {
  DagRunTable,
  ImportErrorTable,
  JobTable,
  SerializedDagTable,
  TaskInstanceTable,
  TaskLogTable,
  TaskRescheduleTable,
  TriggerTable,
} from './schema.ts';

// Rows as a query reads them (kysely's Selectable of each table), for users' own typed queries
// with `new Kysely<DatabaseSchema>(…)` or `app.database.db`. JSON columns are JSON text and time
// columns a Date (PostgreSQL) or ISO text (SQLite): read times with fromDbTime.
/** A trigger row as a query reads it. */
export type TriggerTableRow = Selectable<TriggerTable>;
/** A task instance row as a query reads it. */
export type TaskInstanceRow = Selectable<TaskInstanceTable>;
/** A DAG run row as a query reads it. */
export type DagRunRow = Selectable<DagRunTable>;
/** A serialized DAG row as a query reads it. */
export type SerializedDagRow = Selectable<SerializedDagTable>;
/** An import error row (a DAG file that failed to load) as a query reads it. */
export type ImportErrorRow = Selectable<ImportErrorTable>;
/** A task log line row as a query reads it. */
export type TaskLogRow = Selectable<TaskLogTable>;
/** A job row (a daemon: its kind, host, heartbeat and state) as a query reads it. */
export type JobRow = Selectable<JobTable>;
/** A task reschedule row (a sensor's reschedule) as a query reads it. */
export type TaskRescheduleRow = Selectable<TaskRescheduleTable>;
