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
export type TriggerTableRow = Selectable<TriggerTable>;
export type TaskInstanceRow = Selectable<TaskInstanceTable>;
export type DagRunRow = Selectable<DagRunTable>;
export type SerializedDagRow = Selectable<SerializedDagTable>;
export type ImportErrorRow = Selectable<ImportErrorTable>;
export type TaskLogRow = Selectable<TaskLogTable>;
export type JobRow = Selectable<JobTable>;
export type TaskRescheduleRow = Selectable<TaskRescheduleTable>;
