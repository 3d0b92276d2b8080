import type { Database } from '../../database/connect.ts';
import { type ClaimedTaskInstance, type StartedTaskInstance, openStores } from '../../storage/index.ts';
import type { RuntimeContext } from '../../authoring/operators/base-operator.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';
import { taskSettings } from '../../authoring/dags/task-settings.ts';
import type { TaskResolver } from './worker.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import { DagRunStateBatcher } from '../../model/dag-run-state-batcher.ts';
import { SignalService } from '../../services/signals/signal-service.ts';
import { loadClaimedTask, runtimeContext, taskLabel, type TaskServices } from './claimed-task.ts';
import { TryTakenOverError } from '../../vocabulary/errors.ts';
import { InputService } from '../../services/human-input/input-service.ts';
import { DEFAULT_PUBLIC_URL } from './options.ts';

/** Where people reach the status page: the start of the human-input links tasks send. */
export interface TaskServiceOptions {
  /** @default DEFAULT_PUBLIC_URL */
  readonly publicUrl?: string;
}

/** Makes the services of each task instance a worker runs; one per worker. */
export function taskServices(
  database: Database,
  options: TaskServiceOptions = {},
): (claimed: ClaimedTaskInstance, started: StartedTaskInstance) => TaskServices {
  const storage = openStores(database);
  const inputs = new InputService(storage);
  const publicUrl = options.publicUrl ?? DEFAULT_PUBLIC_URL;
  // One per worker: every task's dagRunStates() reads (ExternalTaskSensors poking) share its rounds.
  const dagRunStates = new DagRunStateBatcher((keys) => storage.dagRuns.readDagRunStates(keys));
  return (claimed, started) => ({
    xcomPull: async (taskId) => {
      const returned = await storage.taskInstances.readReturnValue(claimed.dagId, claimed.runId, taskId);
      return returned === null ? null : (JSON.parse(returned) as JsonValue);
    },
    taskReschedules: () => storage.taskInstances.taskReschedules(claimed.id, started.tryNumber),
    dagRunStates: (query) => dagRunStates.read(query),
    sendSignal: (key, value) => SignalService.of(database).send(key, value ?? null, `task ${claimed.dagId}.${claimed.taskId} of run ${claimed.runId}`),
    latestSignalVersion: (key) => SignalService.of(database).latestVersion(key),
    actedSignal: (key) => storage.signals.readActedSignal(claimed.id, key),
    readTaskState: (key) => storage.taskInstances.readTaskStateValue(claimed.id, key),
    writeTaskState: async (key, json) => {
      const held = { workerJobId: started.workerJobId, tryNumber: started.tryNumber };
      const wrote = await storage.taskInstances.writeTaskState({ taskInstanceId: claimed.id, held, key, json });
      if (!wrote.written) throw new TryTakenOverError(taskLabel(claimed), started.tryNumber, wrote.now);
    },
    askForInput: async (question, timeoutMs) => {
      const held = { workerJobId: started.workerJobId, tryNumber: started.tryNumber };
      const result = await storage.inputs.askForInput({ taskInstanceId: claimed.id, held, question, timeoutMs });
      if (result.asked === null) throw new TryTakenOverError(taskLabel(claimed), started.tryNumber, result.now);
      const { timeoutAt } = result.asked;
      return { link: await inputs.linkFor(result.asked, publicUrl), expiresAt: timeoutAt === null ? null : new Date(timeoutAt).toISOString() };
    },
  });
}

/**
 * Finds a task's operator the way a worker should: the DAG's file is where DAG processing last
 * found it (serialized_dag.fileloc, read with the claim), and only that file is imported, as it
 * is now. The task then runs on the worker's own event loop (`--task-isolation none`).
 */
export function dagFileResolver(database: Database, options: { readonly smartSensors?: SmartSensors } & TaskServiceOptions = {}): TaskResolver {
  const services = taskServices(database, options);
  return async (claimed) => {
    const task = await loadClaimedTask(claimed);
    const settings = taskSettings(task.dag, task.operator);
    return {
      operator: task.operator,
      retry: settings.retry,
      executionTimeoutMs: settings.executionTimeoutMs,
      context: (claimedAgain, started, taskLog, signal): RuntimeContext =>
        runtimeContext(task, claimedAgain, started, taskLog, signal, services(claimedAgain, started), options.smartSensors),
    };
  };
}
