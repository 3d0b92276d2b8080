import type { StorageContext } from './context.ts';
import { appendTaskLogLines, appendTriggerLogLines, type TaskLogLine, type TriggerLogLine } from './append-task-log-lines.ts';
import { readTaskLog, type StoredLogLine } from './read-task-log.ts';
import { taskLogTries } from './task-log-tries.ts';

/** Logs: appendTaskLogLines, appendTriggerLogLines, readTaskLog, taskLogTries. */
export class LogStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  appendTaskLogLines(lines: readonly TaskLogLine[]): Promise<void> {
    return appendTaskLogLines(this.#context, lines);
  }

  appendTriggerLogLines(lines: readonly TriggerLogLine[]): Promise<void> {
    return appendTriggerLogLines(this.#context, lines);
  }

  readTaskLog(taskInstanceId: number, tryNumber: number): Promise<StoredLogLine[]> {
    return readTaskLog(this.#context, taskInstanceId, tryNumber);
  }

  taskLogTries(taskInstanceId: number): Promise<number[]> {
    return taskLogTries(this.#context, taskInstanceId);
  }
}
