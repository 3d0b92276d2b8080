import { toDbTime } from '../database/schema.ts';
import { TRIGGER_FAILURE_METHOD, type FailureKwargs, type StorageContext } from './context.ts';
import { wake } from './wake.ts';

export const STRANDED_DEFERRAL_KWARGS: FailureKwargs = Object.freeze({
  code: 'DF_DEFERRAL_STRANDED',
  error:
    'the deferral lost its trigger row (no trigger would ever fire for it, and it has no timeout to end it): failed so it does not wait forever; defer again, and report it, for it is a bug',
  traceback: null,
  reason: 'trigger_failure',
});

/**
 * The invariant every deferred task instance keeps: it has a trigger row (owned by a live
 * triggerer, or claimable: see listTriggerOwners and claimTriggers), and for a composite wait a
 * row for each member that has not fired into it, or a deadline the timeout sweep will honour. One that has neither would wait forever; this finds them (a few rows at
 * most, through the deferred state's index), fails them with DF_DEFERRAL_STRANDED (scheduled,
 * resumed at the failure method, as a failed trigger's are) and returns how many it found.
 * Triggerers run it now and then (the reconciler); the chaos run asserts it finds none.
 */
export async function failStrandedDeferrals({ db, adapter }: StorageContext, now: number): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const result = await trx
      // transition: strand-repair
      .updateTable('task_instance')
      .set({
        state: 'scheduled',
        // A stranded composite's row is left to the sweep of unused triggers, with its members.
        trigger_id: null,
        next_method: TRIGGER_FAILURE_METHOD,
        next_kwargs: adapter.jsonParam(JSON.stringify(STRANDED_DEFERRAL_KWARGS)),
        updated_at: toDbTime(now),
      })
      .where('state', '=', 'deferred')
      .where('trigger_timeout', 'is', null)
      .where((eb) =>
        eb.or([
          eb('trigger_id', 'is', null),
          // A composite wait (anyOf, allOf) one of whose members that has not fired lost its row.
          eb(
            'trigger_id',
            'in',
            eb
              .selectFrom('trigger_member')
              .select('trigger_member.composite_id')
              .where('trigger_member.outcome', 'is', null)
              .where(({ not, exists, selectFrom }) =>
                not(exists(selectFrom('trigger').select('trigger.id').whereRef('trigger.id', '=', 'trigger_member.member_id'))),
              ),
          ),
        ]),
      )
      .executeTakeFirst();
    const failed = Number(result.numUpdatedRows);
    if (failed > 0) await wake(trx, adapter, 'worker');
    return failed;
  });
}
