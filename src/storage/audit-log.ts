import type { Selectable } from 'kysely';
import { fromDbTime, toDbTime, type AuditLogTable, type AuditSource } from '../database/schema.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';

/** An action a person took, as the audit log keeps it. */
export interface AuditEntry {
  /** Who: the name given with the operator token, or a CLI's OS user. */
  readonly actor: string;
  readonly source: AuditSource;
  /** From where: the web client's address, or the CLI's host. */
  readonly address: string | null;
  /** What: trigger_run, clear, mark_success, mark_failed, pause, unpause, signal, respond. */
  readonly action: string;
  readonly dagId?: string | null;
  readonly runId?: string | null;
  readonly taskInstanceId?: number | null;
  /** The action's own figures (never a value a person gave: those stay in their own, sealed, rows). */
  readonly details?: JsonObject;
  /** What came of it, in words. */
  readonly outcome: string;
}

/** An entry read back. */
export interface AuditRecord extends Required<AuditEntry> {
  readonly id: number;
  /** Epoch ms. */
  readonly at: number;
}

/** Appends one entry; resolves with its id. */
export async function appendAuditEntry({ db }: StorageContext, entry: AuditEntry, now: number): Promise<number> {
  const row = await db
    .insertInto('audit_log')
    .values({
      at: toDbTime(now),
      actor: entry.actor,
      source: entry.source,
      address: entry.address,
      action: entry.action,
      dag_id: entry.dagId ?? null,
      run_id: entry.runId ?? null,
      task_instance_id: entry.taskInstanceId ?? null,
      details: JSON.stringify(entry.details ?? {}),
      outcome: entry.outcome,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return Number(row.id);
}

/** The latest `limit` entries, newest first; `before`: only those of a lower id (the next page). */
export async function listAuditEntries({ db }: StorageContext, options: { readonly limit: number; readonly before?: number }): Promise<AuditRecord[]> {
  let query = db.selectFrom('audit_log').selectAll().orderBy('id', 'desc').limit(options.limit);
  if (options.before !== undefined) query = query.where('id', '<', options.before);
  return (await query.execute()).map(recordOf);
}

function recordOf(row: Selectable<AuditLogTable>): AuditRecord {
  return {
    id: row.id,
    at: fromDbTime(row.at),
    actor: row.actor,
    source: row.source,
    address: row.address,
    action: row.action,
    dagId: row.dag_id,
    runId: row.run_id,
    taskInstanceId: row.task_instance_id === null ? null : Number(row.task_instance_id),
    details: JSON.parse(row.details) as JsonObject,
    outcome: row.outcome,
  };
}
