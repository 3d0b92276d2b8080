import type { LivenessThresholds } from '../services/jobs/job-liveness.ts';
import { optionPicker, seconds } from '../vocabulary/options/option-table.ts';

/*
 * The thresholds by which daemons judge each other dead by heartbeat: a triggerer's (its peers
 * take its triggers) and a worker's (the scheduler retries its tries). Their options live here,
 * apart from each daemon's table, because more than the daemon that acts on each reads it: what
 * judges daemons from outside them (`jobs list`, `jobs check`, `jobs queues`, the status page,
 * the unserved-queue gauge) reads both.
 */

/** The triggerers' --health-check-threshold (see TRIGGERER_OPTIONS). */
export const HEALTH_CHECK_THRESHOLD_OPTION = {
  env: 'DEFERFLOW_TRIGGERER_HEALTH_CHECK_THRESHOLD',
  default: 10,
  unit: 'seconds',
  describe:
    'A triggerer whose heartbeat is this old is dead (frozen, or cut off while its session lingers); peers take its triggers. One whose process is gone is known at once by its liveness lock',
} as const;

/** The schedulers' --zombie-threshold (see SCHEDULER_OPTIONS). */
export const ZOMBIE_THRESHOLD_OPTION = {
  env: 'DEFERFLOW_SCHEDULER_ZOMBIE_THRESHOLD',
  default: 10,
  unit: 'seconds',
  describe:
    'A worker whose heartbeat is this old is dead (frozen, or cut off while its session lingers): its task instances are retried or failed. One whose process is gone is known at once by its liveness lock',
} as const;

/** Both thresholds from the environment (or their defaults): nothing else in it (a keys file) is touched. */
export function livenessThresholds(env: NodeJS.ProcessEnv = process.env): LivenessThresholds {
  const pick = optionPicker({ healthCheckThreshold: HEALTH_CHECK_THRESHOLD_OPTION, zombieThreshold: ZOMBIE_THRESHOLD_OPTION }, {}, env);
  return { triggererMs: seconds(pick('healthCheckThreshold'), 'healthCheckThreshold'), workerMs: seconds(pick('zombieThreshold'), 'zombieThreshold') };
}
