import type { TaskResolver } from './worker.ts';
import { runToResult, type PreparedTask, type TaskRunner } from './task-runner.ts';

/**
 * Task code on the worker's own event loop (`--task-isolation none`, and workers built around a
 * TaskResolver): no process per task, but a task that blocks the loop blocks the worker, an
 * execution timeout only aborts its signal, and a crash is the worker's.
 */
export class InlineTaskRunner implements TaskRunner {
  constructor(private readonly resolve: TaskResolver) {}

  async prepare(claimed: Parameters<TaskResolver>[0]): Promise<PreparedTask> {
    const task = await this.resolve(claimed);
    return {
      retry: task.retry,
      executionTimeoutMs: task.executionTimeoutMs,
      run: (label, claimedAgain, started, tryLog, signal) =>
        runToResult(label, task.operator, () => task.context(claimedAgain, started, tryLog.task, signal), started),
      stopped: async () => {},
    };
  }

  async close(): Promise<void> {}
}
