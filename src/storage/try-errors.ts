import type { StorageContext } from './context.ts';

/** Why a try failed, as its log's last error line says: what `tasks list --json` shows of a failed try. */
export interface TryError {
  /** The stable code (DF_TASK_FAILED, DF_TASK_DEFERRAL, …), when the line has one. */
  readonly code: string | null;
  readonly error: string;
  /** The stack: the task's own, or for a failed wait its trigger's. */
  readonly traceback: string | null;
}

/**
 * The last error line of each given try's own log (not its triggers' lines), by task instance
 * id; a try that logged none is missing from the map.
 */
export async function tryErrors({ db }: StorageContext, tries: readonly { readonly id: number; readonly tryNumber: number }[]): Promise<Map<number, TryError>> {
  const found = new Map<number, TryError>();
  if (tries.length === 0) return found;
  const wanted = new Map(tries.map((t) => [t.id, t.tryNumber]));
  const rows = await db
    .selectFrom('task_log')
    .select(['task_instance_id', 'try_number', 'message', 'fields'])
    .where(
      'task_instance_id',
      'in',
      tries.map((t) => t.id),
    )
    .where('level', 'in', ['error', 'fatal'])
    .orderBy('id')
    .execute();
  for (const row of rows) {
    if (wanted.get(row.task_instance_id) !== row.try_number) continue;
    const fields = row.fields === null ? {} : (JSON.parse(row.fields) as Record<string, unknown>);
    found.set(row.task_instance_id, {
      code: typeof fields.code === 'string' ? fields.code : null,
      error: typeof fields.error === 'string' ? fields.error : row.message,
      traceback: typeof fields.traceback === 'string' ? fields.traceback : null,
    });
  }
  return found;
}
