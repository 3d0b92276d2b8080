import { EncryptionKeyError } from '../vocabulary/errors.ts';
import type { Keyring, SealedColumn, SealedForm, StoredValue } from '../database/encryption/keyring.ts';
import type { DialectAdapter } from '../database/dialect.ts';
import type { TriggerRow } from './claim-triggers.ts';

/**
 * Reading values that may be sealed (see encryption/keyring.ts). A value that cannot be opened
 * does not fail the read it came with: the row carries the error, so only its own task instances
 * fail (the triggerer fails the trigger's, the worker the try's) and every other row goes on.
 */

/**
 * Trigger rows as read, kwargs opened (a large batch on the keyring's sealing service); a row whose
 * kwargs cannot be has `unreadable` instead.
 */
export async function openTriggerRows(keyring: Keyring, rows: readonly StoredTriggerRow[]): Promise<TriggerRow[]> {
  const opened = await keyring.openMany(
    rows.map((row) => row.kwargs),
    'trigger.kwargs',
    (index) => `trigger ${rows[index]!.id}`,
  );
  return rows.map((row, index) => {
    const kwargs = opened[index]!;
    const watching = row.watcher ? { watcher: row.watcher, cursor: row.cursor ?? null } : {};
    if (kwargs instanceof EncryptionKeyError) return { id: row.id, classpath: row.classpath, kwargs: '{}', unreadable: kwargs, ...watching };
    // A plain row (kwargs read as they are) is passed on as it is: no copy per claimed trigger.
    return kwargs === row.kwargs ? (row as TriggerRow) : { id: row.id, classpath: row.classpath, kwargs, ...watching };
  });
}

/** Every column that holds sealable values, with its table and what its rows are called in messages. */
export const SEALABLE_COLUMNS: readonly {
  readonly table: 'trigger' | 'task_instance' | 'task_state' | 'trigger_member' | 'task_input';
  readonly column: 'kwargs' | 'next_kwargs' | 'next_event' | 'value' | 'outcome' | 'response';
  /** The table's key column (an integer). */
  readonly id: 'id' | 'task_instance_id';
  readonly sealed: SealedColumn;
  readonly row: string;
}[] = [
  { table: 'trigger', column: 'kwargs', id: 'id', sealed: 'trigger.kwargs', row: 'trigger' },
  { table: 'task_instance', column: 'next_kwargs', id: 'id', sealed: 'task_instance.next_kwargs', row: 'task instance' },
  { table: 'task_instance', column: 'next_event', id: 'id', sealed: 'task_instance.next_event', row: 'task instance' },
  { table: 'task_state', column: 'value', id: 'id', sealed: 'task_state.value', row: 'task state' },
  { table: 'trigger_member', column: 'outcome', id: 'id', sealed: 'trigger_member.outcome', row: 'trigger member' },
  { table: 'task_input', column: 'response', id: 'task_instance_id', sealed: 'task_input.response', row: 'the question of task instance' },
];

/** The form the daemons seal `column`'s values in on this dialect (see DialectAdapter.sealedEventForm). */
export function sealedFormOf(adapter: DialectAdapter, column: SealedColumn): SealedForm {
  return column === 'task_instance.next_event' ? adapter.sealedEventForm : 'text';
}

/** A trigger row as read: its kwargs possibly sealed. */
export interface StoredTriggerRow {
  readonly id: number;
  readonly classpath: string;
  readonly kwargs: StoredValue;
  readonly watcher?: number;
  readonly cursor?: string | null;
}

/** A resuming task instance's kwargs: next_kwargs with the event (kept in next_event) as `event`. */
export type OpenedNextKwargs =
  | { readonly json: string | null; readonly unreadable?: undefined }
  | { readonly json: null; readonly unreadable: EncryptionKeyError };

export function openNextKwargs(keyring: Keyring, taskInstanceId: number, nextKwargs: StoredValue | null, nextEvent: StoredValue | null): OpenedNextKwargs {
  const row = `task instance ${taskInstanceId}`;
  try {
    const kwargs = nextKwargs === null ? null : keyring.open(nextKwargs, 'task_instance.next_kwargs', row);
    if (nextEvent === null) return { json: kwargs };
    const event = keyring.open(nextEvent, 'task_instance.next_event', row);
    // As the resumed method has always received it: its kwargs with the event beside them.
    return { json: JSON.stringify({ ...(kwargs === null ? {} : JSON.parse(kwargs)), event: JSON.parse(event) }) };
  } catch (error) {
    if (!(error instanceof EncryptionKeyError)) throw error;
    return { json: null, unreadable: error };
  }
}
