/**
 * A task runner process (see process-task-runner.ts): the worker forks it, and it runs one task
 * at a time, as the worker tells it over the IPC channel. Nothing here touches the database:
 * what a task's context reads or writes is asked of the worker (a `call`), which holds the
 * connections. When the channel closes (the worker stopped or died) the runner exits.
 */
import pino, { type Logger } from 'pino';
import type { Dag } from '../../authoring/dags/dag.ts';
import { taskSettings } from '../../authoring/dags/task-settings.ts';
import { loadedDagFile } from '../../authoring/dags/loader.ts';
import type { DagRunSettings, RunSettings } from './run-settings-cache.ts';
import type { AnyOperator } from '../../authoring/operators/base-operator.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import type { ClaimedTaskInstance } from '../../storage/index.ts';
import { loadClaimedTask, runtimeContext, TASK_SERVICE_NAMES, type TaskServices } from './claimed-task.ts';
import {
  fromWireError,
  RUNNER_PRELOAD_ENV,
  RUNNER_SMART_SENSORS_ENV,
  toWireError,
  type FromRunner,
  type ToRunner,
  type WireTaskResult,
} from './runner-protocol.ts';
import { runToResult, type TaskResult } from './task-runner.ts';
import { registerTypeScriptHooks } from '../../authoring/user-code/typescript-hooks.ts';
import type { SharedEntry } from '../../authoring/user-code/shared-modules.ts';
import { shareInTaskRunner } from '../../authoring/user-code/task-runner-api.ts';
import { type CompiledUserFile, compileUserFilesWith } from '../../authoring/user-code/compile-user-file.ts';

// Nothing to tell once the worker has let go (it stopped, retired this runner while it was
// starting, or died): the disconnect handler ends the process. process.connected turns false
// only once the loop has read the channel's end, so a message sent before that (the 'ready'
// at the end of a start) fails with EPIPE; without a callback that failure would be an
// unhandled 'error' event, crashing the runner with a stack trace instead of ending it quietly.
const send = (message: FromRunner) => {
  if (process.connected) process.send!(message, undefined, undefined, ignoreLostWorker);
};
function ignoreLostWorker(): void {}
const smartSensors = JSON.parse(process.env[RUNNER_SMART_SENSORS_ENV] ?? 'null') as SmartSensors | null;

/** The task last loaded, and the task instance it was loaded for. */
let task: LoadedTask | null = null;
interface LoadedTask {
  readonly dag: Dag;
  readonly operator: AnyOperator;
  readonly taskInstanceId: number;
}

async function loadTask(claimed: ClaimedTaskInstance): Promise<LoadedTask> {
  return { ...(await loadClaimedTask(claimed)), taskInstanceId: claimed.id };
}
let running: AbortController | null = null;
/** Requests to the worker awaiting its reply, by id. */
const requests = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
let nextRequest = 0;

/** Sends a request (a call or a compile) to the worker, and resolves with its reply. */
function request(message: DistributiveOmit<Extract<FromRunner, { id: number }>, 'id'>): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const id = nextRequest++;
    requests.set(id, { resolve, reject });
    send({ ...message, id } as FromRunner);
  });
}
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The context's database services, answered by the worker. */
const services = Object.fromEntries(
  TASK_SERVICE_NAMES.map((name) => [name, (...args: unknown[]) => request({ type: 'call', name, args })]),
) as unknown as TaskServices;

// DAG files are compiled by the worker, once for all its runners (see compileUserFilesWith).
compileUserFilesWith((file, source) => request({ type: 'compile', file, source }) as Promise<CompiledUserFile>);

async function handle(message: ToRunner): Promise<void> {
  switch (message.type) {
    case 'prepare': {
      try {
        task = await loadTask(message.claimed);
        const settings = taskSettings(task.dag, task.operator);
        send({
          type: 'prepared',
          retry: settings.retry,
          executionTimeoutMs: settings.executionTimeoutMs,
          file: loadedDagFile(message.claimed.fileloc!) ?? null,
          dagTasks: runSettingsOf(task.dag),
        });
      } catch (error) {
        task = null;
        send({ type: 'prepare-failed', error: toWireError(error) });
      }
      return;
    }
    case 'run': {
      const abort = new AbortController();
      running = abort;
      const taskLog = taskLoggerAt(message.log.level).child(message.log.bindings);
      let result: TaskResult;
      try {
        // Another runner may have prepared it (the worker lets go of a runner while it records the
        // start): the task is loaded here too, from this runner's copy of the DAG file if it has one.
        if (task?.taskInstanceId !== message.claimed.id) task = await loadTask(message.claimed);
        const loaded = task;
        result = await runToResult(
          message.label,
          loaded.operator,
          () => runtimeContext(loaded, message.claimed, message.started, taskLog, abort.signal, services, smartSensors ?? undefined),
          message.started,
        );
      } catch (error) {
        // The DAG file changed or broke since another runner loaded it.
        result = { kind: 'failed', error, retryable: true };
      }
      running = null;
      const wire: WireTaskResult = result.kind === 'failed' ? { kind: 'failed', error: toWireError(result.error), retryable: result.retryable } : result;
      send({ type: 'result', result: wire, rss: process.memoryUsage.rss() });
      return;
    }
    case 'abort':
      running?.abort(fromWireError(message.reason));
      return;
    case 'reply': {
      const pending = requests.get(message.id);
      requests.delete(message.id);
      if (message.error) pending?.reject(fromWireError(message.error));
      else pending?.resolve(message.value);
      return;
    }
  }
}

/**
 * The logger a task's lines go to the worker through, one per level: making a pino logger costs
 * a fifth of a millisecond, as much as the rest of a short task's run here; a child, little.
 */
const taskLoggers = new Map<string, Logger>();
function taskLoggerAt(level: string): Logger {
  let logger = taskLoggers.get(level);
  if (!logger) {
    logger = pino({ level, base: null }, { write: (text: string) => send({ type: 'log', text }) });
    taskLoggers.set(level, logger);
  }
  return logger;
}

/** The run settings of every task of `dag` whose settings are valid (the others are prepared one by one, and fail there). */
function runSettingsOf(dag: Dag): DagRunSettings {
  const tasks = new Map<string, RunSettings>();
  for (const operator of dag.tasks) {
    try {
      const { retry, executionTimeoutMs } = taskSettings(dag, operator);
      tasks.set(operator.taskId, { retry, executionTimeoutMs });
    } catch {}
  }
  return tasks;
}

process.on('message', (message: ToRunner) => void handle(message));
process.on('disconnect', () => process.exit(0));

// What every DAG file needs (deferflow's authoring API, the built-in triggers, the TypeScript
// hooks) is loaded before the runner says it is ready: the worker hands it a task only then, and
// meanwhile gives that task to any runner that frees up first. The entries first: once the hooks
// are registered, every module loaded goes through them. Which entries, and how each is shared,
// the worker says (see sharedEntries): the runner never names the entry point above its layer,
// and loads no database code (the rest of deferflow comes when task code first calls it).
const preload = JSON.parse(process.env[RUNNER_PRELOAD_ENV] ?? '[]') as SharedEntry[];
await shareInTaskRunner(preload)
  .then(registerTypeScriptHooks)
  .catch(() => {});
send({ type: 'ready' });
