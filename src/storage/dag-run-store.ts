import type { StorageContext } from './context.ts';
import { createDagRun, type NewDagRun } from './create-dag-run.ts';
import {
  decideTaskInstances,
  listUnfinishedDagRuns,
  runNeedsDecisions,
  setDagRunState,
  taskInstancesOfRun,
  type RunTaskInstance,
  type UnfinishedDagRun,
} from './dag-run-progress.ts';
import { finishedTaskMs, runProgress, type RunProgress } from './run-progress.ts';
import { latestScheduledLogicalDate, latestSignalRunVersion } from './latest-scheduled-run.ts';
import { findDagRun, listDagRuns, type DagRunFilter, type DagRunRow } from './list-dag-runs.ts';
import { readDagRunStates } from './read-dag-run-states.ts';
import type { DagRunStates, DagRunStatesKey } from '../model/dag-run-states.ts';
import type { DagRunState, TaskInstanceState } from '../database/schema.ts';
import type { SchedulerDag } from '../model/scheduler-dag.ts';

/** DAG runs: createDagRun, listUnfinishedDagRuns, runNeedsDecisions, taskInstancesOfRun, decideTaskInstances, setDagRunState, latestScheduledLogicalDate, latestSignalRunVersion, listDagRuns, findDagRun, runProgress, finishedTaskMs, readDagRunStates. */
export class DagRunStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  createDagRun(dag: SchedulerDag, run: NewDagRun, now = Date.now()): Promise<number | null> {
    return createDagRun(this.#context, dag, run, now);
  }

  listUnfinishedDagRuns(limit: number): Promise<UnfinishedDagRun[]> {
    return listUnfinishedDagRuns(this.#context, limit);
  }

  runNeedsDecisions(dagId: string, runId: string, finishedStates: readonly TaskInstanceState[]): Promise<boolean> {
    return runNeedsDecisions(this.#context, dagId, runId, finishedStates);
  }

  taskInstancesOfRun(dagId: string, runId: string): Promise<RunTaskInstance[]> {
    return taskInstancesOfRun(this.#context, dagId, runId);
  }

  decideTaskInstances(ids: readonly number[], state: 'scheduled' | 'skipped' | 'upstream_failed' | 'failed', now = Date.now()): Promise<number[]> {
    return decideTaskInstances(this.#context, ids, state, now);
  }

  setDagRunState(dagRunId: number, from: DagRunState, to: DagRunState, now = Date.now()): Promise<boolean> {
    return setDagRunState(this.#context, dagRunId, from, to, now);
  }

  latestScheduledLogicalDate(dagId: string): Promise<number | null> {
    return latestScheduledLogicalDate(this.#context, dagId);
  }

  latestSignalRunVersion(dagId: string): Promise<number | null> {
    return latestSignalRunVersion(this.#context, dagId);
  }

  listDagRuns(filter: DagRunFilter): Promise<DagRunRow[]> {
    return listDagRuns(this.#context, filter);
  }

  findDagRun(dagId: string, runId: string): Promise<{ id: number; state: DagRunState } | null> {
    return findDagRun(this.#context, dagId, runId);
  }

  runProgress(dagId: string, runId: string): Promise<RunProgress | null> {
    return runProgress(this.#context, dagId, runId);
  }

  finishedTaskMs(dagId: string, runId: string): Promise<number> {
    return finishedTaskMs(this.#context, dagId, runId);
  }

  /** DAG runs' states and some of their task instances' (what ExternalTaskSensor waits on); missing runs left out. */
  readDagRunStates(keys: readonly DagRunStatesKey[]): Promise<DagRunStates[]> {
    return readDagRunStates(this.#context, keys);
  }
}
