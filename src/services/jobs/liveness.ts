import type { LivenessLocks } from '../../database/liveness-locks.ts';
import type { JobLiveness } from '../../storage/index.ts';

/** A daemon that rows name as theirs (a trigger's owner, a task instance's worker), with its job row (null: none). */
export interface Holder {
  readonly id: number;
  readonly job: JobLiveness | null;
}

/**
 * Which holders are dead, so that what they hold goes to the living:
 * - no job row (pruned, or deleted by hand), or a job that ended: at once;
 * - a liveness lock let go (see liveness-locks.ts): its process is gone (killed, or cut off from
 *   the database), recognised at the next look, whatever its heartbeat says;
 * - a heartbeat older than `aliveSince`: alive, perhaps, but not working (frozen, or partitioned
 *   while its session lingers), past the threshold.
 * The locks are only tried for holders the row alone does not condemn; `self` is never dead.
 */
export async function deadHolders(holders: readonly Holder[], aliveSince: number, locks: LivenessLocks, self: number | null): Promise<number[]> {
  const dead: number[] = [];
  const locked: JobLiveness[] = [];
  for (const { id, job } of holders) {
    if (id === self) continue;
    if (job === null || !job.running || job.latestHeartbeat < aliveSince) dead.push(id);
    else if (job.livenessLock !== null) locked.push(job);
  }
  if (locked.length > 0) dead.push(...(await locks.gone(locked)));
  return dead;
}
