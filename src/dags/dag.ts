import { InvalidDagError } from '../errors.ts';
import type { BaseOperator, TaskDefaults } from '../operators/base-operator.ts';
import type { JsonObject } from '../serialization/json.ts';

export interface DagOptions {
  /** Letters, digits, `_`, `-` and `.`. */
  readonly dagId: string;
  readonly description?: string;
  /** Settings every task takes unless it sets its own. */
  readonly defaultArgs?: TaskDefaults;
  /** Params every task sees (a task's own params are laid over them). */
  readonly params?: JsonObject;
  readonly tags?: readonly string[];
}

const DAG_ID = /^[A-Za-z0-9_.-]+$/;
// A registered symbol, not instanceof: a DAG file loaded as CommonJS (a .ts file outside a
// "type": "module" package) gets its own copy of deferflow's classes.
const DAG_BRAND = Symbol.for('deferflow.Dag');

/** Whether `value` is a Dag, from this copy of deferflow or another. */
export function isDag(value: unknown): value is Dag {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[DAG_BRAND] === true;
}

/**
 * A DAG: tasks and the order they run in. Tasks join with `dag.add(...)`; their order comes
 * from `a.then(b)` / `chain(...)`. Every task must belong to this DAG, and the graph must have
 * no cycle: `validate()` (called by the loader) refuses anything else, naming the task.
 */
export class Dag {
  readonly [DAG_BRAND] = true;
  readonly dagId: string;
  readonly options: DagOptions;
  readonly #tasks = new Map<string, BaseOperator<any>>();

  constructor(options: DagOptions) {
    if (typeof options?.dagId !== 'string' || !DAG_ID.test(options.dagId)) {
      throw new InvalidDagError(`DAG id ${JSON.stringify(options?.dagId)} must be letters, digits, "_", "-" or "."`);
    }
    this.dagId = options.dagId;
    this.options = Object.freeze({ ...options });
  }

  /** Adds tasks (operators made with a taskId); returns the DAG. */
  add(...tasks: BaseOperator<any>[]): this {
    for (const task of tasks) {
      const taskId = task.taskId;
      if (task.dagId !== null && task.dagId !== this.dagId) {
        throw new InvalidDagError(`DAG ${this.dagId}: task ${taskId} already belongs to DAG ${task.dagId}`);
      }
      const existing = this.#tasks.get(taskId);
      if (existing && existing !== task) throw new InvalidDagError(`DAG ${this.dagId}: two tasks have the id ${taskId}`);
      task.dagId = this.dagId;
      this.#tasks.set(taskId, task);
    }
    return this;
  }

  get tasks(): readonly BaseOperator<any>[] {
    return [...this.#tasks.values()];
  }

  task(taskId: string): BaseOperator<any> | undefined {
    return this.#tasks.get(taskId);
  }

  /** Refuses an upstream task that is not in this DAG, and any cycle (naming it: a -> b -> a). */
  validate(): void {
    const members = new Set(this.#tasks.values());
    for (const task of members) {
      for (const upstream of task.upstream) {
        if (!members.has(upstream)) {
          throw new InvalidDagError(`DAG ${this.dagId}: task ${task.taskId} waits for ${describeTask(upstream)}, which is not a task of this DAG (add it with dag.add)`);
        }
      }
    }
    const visiting: string[] = [];
    const done = new Set<string>();
    const visit = (task: BaseOperator<any>): void => {
      const at = visiting.indexOf(task.taskId);
      if (at !== -1) throw new InvalidDagError(`DAG ${this.dagId} has a cycle: ${[...visiting.slice(at), task.taskId].join(' -> ')}`);
      if (done.has(task.taskId)) return;
      visiting.push(task.taskId);
      for (const upstream of [...task.upstream].sort((a, b) => (a.taskId < b.taskId ? -1 : 1))) visit(upstream);
      visiting.pop();
      done.add(task.taskId);
    };
    for (const task of [...this.#tasks.values()].sort((a, b) => (a.taskId < b.taskId ? -1 : 1))) visit(task);
  }
}

function describeTask(task: BaseOperator<any>): string {
  try {
    return task.taskId;
  } catch {
    return `a ${task.constructor.name} without a taskId`;
  }
}
