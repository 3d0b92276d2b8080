import { sql } from '../database/kysely.ts';
import { fromDbTime, toDbTime } from '../database/schema.ts';
import { wakeForChangedRows } from './wake.ts';
import type { StorageContext } from './context.ts';

/**
 * up_for_retry and up_for_reschedule task instances whose ready_at has passed go back to
 * scheduled, for a worker to claim (a transition of the state machine in
 * task-instance-state-machine.ts). Conditional on the state, so several schedulers may run it.
 */
export async function scheduleReadyTaskInstances({ db, adapter }: StorageContext, now: number): Promise<number> {
  const rows = await db
    // transition: ready-again
    .updateTable('task_instance')
    .set({ state: 'scheduled', ready_at: null, updated_at: toDbTime(now) })
    .where('state', 'in', ['up_for_retry', 'up_for_reschedule'])
    .where('ready_at', '<=', toDbTime(now))
    // Workers have task instances to claim: woken by the update itself, in its round trip.
    .returning(wakeForChangedRows(adapter, 'worker'))
    .execute();
  return rows.length;
}

/**
 * The earliest ready_at (epoch ms) of an up_for_retry or up_for_reschedule task instance, or of
 * the deadline of a question awaiting input (time-out-awaited-input.ts); null when none waits.
 * Each through its own partial index.
 */
export async function nextReadyAt({ db }: StorageContext): Promise<number | null> {
  const earliest = (states: readonly ('up_for_retry' | 'up_for_reschedule' | 'awaiting_input')[]) =>
    db.selectFrom('task_instance').select(sql<Date | string | null>`min(ready_at)`.as('ready_at')).where('state', 'in', states);
  const rows = await earliest(['up_for_retry', 'up_for_reschedule'])
    .unionAll(earliest(['awaiting_input']))
    .execute();
  const times = rows.flatMap((row) => (row.ready_at ? [fromDbTime(row.ready_at)] : []));
  return times.length === 0 ? null : Math.min(...times);
}
