import { toDbTime } from '../db/schema.ts';
import { wake } from './wake.ts';
import type { StorageContext } from './context.ts';

/**
 * up_for_retry and up_for_reschedule task instances whose ready_at has passed go back to
 * scheduled, for a worker to claim (a transition of the state machine in
 * task-instance-state-machine.ts). Conditional on the state, so several schedulers may run it.
 */
export async function scheduleReadyTaskInstances({ db, adapter }: StorageContext, now: number): Promise<number> {
  const result = await db
    // transition: ready-again
    .updateTable('task_instance')
    .set({ state: 'scheduled', ready_at: null, updated_at: toDbTime(now) })
    .where('state', 'in', ['up_for_retry', 'up_for_reschedule'])
    .where('ready_at', '<=', toDbTime(now))
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) > 0) await wake(db, adapter, 'worker');
  return Number(result.numUpdatedRows);
}
