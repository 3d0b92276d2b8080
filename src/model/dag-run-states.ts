import type { DagRunState, TaskInstanceState } from '../database/schema.ts';

/**
 * One question a trigger or a sensor may ask of deferflow's own database: what state a DAG run
 * (by its DAG and logical date) and some of its task instances are in. Read-only by construction:
 * this is the whole vocabulary, so a trigger cannot reach any other table or write anything.
 */
export interface DagRunStatesQuery {
  /** The DAG whose run is asked for. */
  readonly dagId: string;
  /** The run's logical date: ISO-8601 with an offset or Z. */
  readonly logicalDate: string;
  /** The tasks whose instances are wanted; none (or null): only the run's own state. */
  readonly taskIds?: readonly string[] | null;
}

/** The states of other DAG runs' task instances, as context.dagRunStates() reads them (ExternalTaskSensor). */
export interface DagRunStates {
  /** The run's DAG id. */
  readonly dagId: string;
  /** ISO-8601, UTC. */
  readonly logicalDate: string;
  /** The run's id. */
  readonly runId: string;
  /** The run's state. */
  readonly state: DagRunState;
  /**
   * The states of the asked tasks' instances, by task id (a list: a mapped task has one instance
   * per map index). A task id the run has no instance of is absent.
   */
  readonly taskStates: Readonly<Record<string, readonly (TaskInstanceState | null)[]>>;
}

/** A run to read, by DAG and logical date (epoch ms), with the task ids whose instances are wanted. */
export interface DagRunStatesKey {
  readonly dagId: string;
  readonly logicalDate: number;
  readonly taskIds: readonly string[];
}

/** Reads DAG runs' states: answers null for a run that does not exist (yet). */
export type DagRunStatesReader = (query: DagRunStatesQuery) => Promise<DagRunStates | null>;
