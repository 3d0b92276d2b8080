/**
 * The order test files start in: the longest first, so that none of them starts late and runs on
 * alone while the other forks have nothing left (one full run ended 90 s after the rest, with
 * task-isolation.test.ts started last). vitest's own order puts the longest first only from the
 * durations of an earlier run on the same machine, which a clean checkout (CI) does not have;
 * without them it goes by file size, and the small files of long waits (worker-pause, cli-jobs)
 * then start near the end. The files below took longest in full runs on the 2-core machine
 * (2026-11-28, 40–135 s each); every other file follows, in vitest's order.
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const LONGEST_FIRST = [
  'test/process/failover.test.ts',
  'test/process/package.test.ts',
  'test/process/runtime-processes.test.ts',
  'test/process/task-isolation.test.ts',
  'test/process/standalone-processes.test.ts',
  'test/process/watchers.test.ts',
  'test/process/sensors/sensor-modes.test.ts',
  'test/process/signals/signal-actions.test.ts',
  'test/process/worker-pause.test.ts',
  'test/process/cli-dags.test.ts',
  'test/process/cli-jobs.test.ts',
  'test/process/queues.test.ts',
  'test/process/encryption.test.ts',
  'test/process/triggerer-processes.test.ts',
  'test/process/streaming-example.test.ts',
  'test/process/observability/health.test.ts',
  'test/process/worker-outage.test.ts',
  'test/process/cli.test.ts',
  'test/process/triggerer-watchdog.test.ts',
  'test/process/chaos.test.ts',
  'test/process/signals/signal-service.test.ts',
  'test/process/cli-database.test.ts',
];

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const index = LONGEST_FIRST.findIndex((name) => file.moduleId.endsWith(`/${name}`));
      return index < 0 ? LONGEST_FIRST.length : index;
    };
    // Stable: files off the list keep vitest's order among themselves.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
