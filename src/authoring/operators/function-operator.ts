import { InvalidDagError } from '../../vocabulary/errors.ts';
import { BaseOperator, type RuntimeContext, type TaskOptions } from './base-operator.ts';

/** A FunctionOperator's options: the task's, the function it runs, and optionally where a deferral resumes. */
export interface FunctionOperatorOptions<Context extends RuntimeContext> extends TaskOptions {
  /**
   * The task's work. What it returns (JSON) is kept as the task's return value; it may defer
   * like any operator by throwing `new TaskDeferred(...)`, resuming in `resume`.
   */
  readonly fn: (context: Context) => unknown;
  /** Called as `resume(context, event, kwargs)` when a deferral made with method 'resume' fires. */
  readonly resume?: (context: Context, event: unknown, kwargs: Record<string, unknown>) => unknown;
}

/**
 * A task made from a function (Airflow's PythonOperator):
 *
 *   const extract = new FunctionOperator({ taskId: 'extract', fn: async (context) => fetchRows(context.params) });
 */
export class FunctionOperator<Context extends RuntimeContext = RuntimeContext> extends BaseOperator<Context> {
  /** The function the task runs. */
  readonly fn: FunctionOperatorOptions<Context>['fn'];
  readonly #resume: FunctionOperatorOptions<Context>['resume'];

  constructor(options: FunctionOperatorOptions<Context>) {
    const { fn, resume, ...taskOptions } = options;
    super(taskOptions);
    if (typeof fn !== 'function') throw new InvalidDagError(`task ${options.taskId}: FunctionOperator needs fn, a function (got ${typeof fn})`);
    if (resume !== undefined && typeof resume !== 'function')
      throw new InvalidDagError(`task ${options.taskId}: FunctionOperator resume must be a function (got ${typeof resume})`);
    this.fn = fn;
    this.#resume = resume;
  }

  /** Runs the function with the context. */
  execute(context: Context): unknown {
    return this.fn(context);
  }

  /** Resumes a deferral at the `resume` function given (the method named `resume`). */
  resume(context: Context, event: unknown, kwargs: Record<string, unknown>): unknown {
    if (!this.#resume) throw new InvalidDagError(`task ${this.taskId} deferred to 'resume', but its FunctionOperator has no resume function`);
    return this.#resume(context, event, kwargs);
  }
}
