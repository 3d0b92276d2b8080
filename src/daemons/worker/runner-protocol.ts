import type { RetryPolicy } from '../../model/retry-policy.ts';
import type { DagRunSettings } from './run-settings-cache.ts';
import type { ClaimedTaskInstance, StartedTaskInstance } from '../../storage/index.ts';
import type { TaskResult } from './task-runner.ts';
import type { TASK_SERVICE_NAMES } from './claimed-task.ts';

/*
 * What a worker and its task runner processes say to each other over the IPC channel
 * (structured clone). One task at a time per runner:
 *
 *   runner → worker: ready (started and warm)
 *   worker → runner: prepare (load the DAG file and task) → runner: prepared | prepare-failed
 *                    (only for a task whose DAG file the worker has no settings of: RunSettingsCache)
 *   worker → runner: run (execute or resume)            → runner: log*, call*, result
 *                    (the worker lets go of the runner between the two while it records the start:
 *                    a run may come to another runner, which loads the task itself)
 *   worker → runner: abort (timeout, signal, stop)       the runner is killed if it does not end soon
 *   worker → runner: reply (to a call: a database service of the task's context)
 *   runner → worker: compile (a user file's text, at any time) → worker: reply (its CommonJS code)
 */

/**
 * The environment variable a worker starts its runners with: the smart-sensor settings (JSON,
 * or null), which a runner needs before it loads any DAG file.
 */
export const RUNNER_SMART_SENSORS_ENV = 'DEFERFLOW_RUNNER_SMART_SENSORS';
/** The environment variable carrying the entry points a runner shares before it is ready (JSON: SharedEntry[]; see sharedEntries). */
export const RUNNER_PRELOAD_ENV = 'DEFERFLOW_RUNNER_PRELOAD';

/** An error as it crosses the channel: what logs and the failure record need, its code kept. */
export interface WireError {
  readonly name: string;
  readonly message: string;
  readonly stack: string | null;
  readonly code: string | null;
}

export type TaskServiceName = (typeof TASK_SERVICE_NAMES)[number];

export type ToRunner =
  | { readonly type: 'prepare'; readonly claimed: ClaimedTaskInstance }
  | {
      readonly type: 'run';
      readonly label: string;
      readonly claimed: ClaimedTaskInstance;
      readonly started: StartedTaskInstance;
      /** The task logger's level and bindings: the runner logs as the worker's task logger would. */
      readonly log: { readonly level: string; readonly bindings: Record<string, unknown> };
    }
  | { readonly type: 'abort'; readonly reason: WireError }
  | { readonly type: 'reply'; readonly id: number; readonly value?: unknown; readonly error?: WireError };

/** TaskResult as it crosses the channel (a failure's error as a WireError). */
export type WireTaskResult = Exclude<TaskResult, { kind: 'failed' }> | { readonly kind: 'failed'; readonly error: WireError; readonly retryable: boolean };

export type FromRunner =
  /** Started, with deferflow and the TypeScript hooks loaded: a task given to it now does not wait for them. */
  | { readonly type: 'ready' }
  /**
   * The task's settings, and those of every task of its DAG in the version of the DAG file loaded
   * and the local modules it imports (null if unknown): the worker starts them without asking
   * again while the file's version is that one (see RunSettingsCache).
   */
  | {
      readonly type: 'prepared';
      readonly retry: RetryPolicy;
      readonly executionTimeoutMs: number | null;
      readonly file: { readonly version: string; readonly localImports: readonly string[] } | null;
      readonly dagTasks: DagRunSettings;
    }
  | { readonly type: 'prepare-failed'; readonly error: WireError }
  /** A line the task's code logged: pino JSON text, bound to the try. */
  | { readonly type: 'log'; readonly text: string }
  | { readonly type: 'call'; readonly id: number; readonly name: TaskServiceName; readonly args: readonly unknown[] }
  /** A user file to compile (see compileUserFilesWith): the worker replies with a CompiledUserFile. */
  | { readonly type: 'compile'; readonly id: number; readonly file: string; readonly source: string }
  /** `rss`: the runner's resident memory after the run, in bytes (a runner past its ceiling is replaced). */
  | { readonly type: 'result'; readonly result: WireTaskResult; readonly rss: number };

export function toWireError(thrown: unknown): WireError {
  if (typeof thrown === 'object' && thrown !== null) {
    const { name, message, stack, code } = thrown as { name?: unknown; message?: unknown; stack?: unknown; code?: unknown };
    if (typeof message === 'string') {
      return {
        name: typeof name === 'string' ? name : 'Error',
        message,
        stack: typeof stack === 'string' ? stack : null,
        code: typeof code === 'string' ? code : null,
      };
    }
  }
  let text: string;
  try {
    text = typeof thrown === 'string' ? thrown : (JSON.stringify(thrown) ?? String(thrown));
  } catch {
    text = String(thrown);
  }
  return { name: 'Error', message: text, stack: null, code: null };
}

/** The error again, on the other side: its name, message, stack and stable code (errors are recognised by shape). */
export function fromWireError(wire: WireError): Error {
  return new ForwardedError(wire);
}

/** An error thrown on the other side of the channel, as it was (name, message, stack, code). */
class ForwardedError extends Error {
  readonly code?: string;

  constructor(wire: WireError) {
    super(wire.message);
    this.name = wire.name;
    this.stack = wire.stack ?? `${wire.name}: ${wire.message}`;
    if (wire.code !== null) this.code = wire.code;
  }
}
