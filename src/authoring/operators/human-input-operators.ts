import { InvalidDagError } from '../../vocabulary/errors.ts';
import type { InputField, InputResponse } from '../../model/human-input.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import type { DurationInput } from '../../vocabulary/time/duration.ts';
import { BaseOperator, type OnAwaitingInput, type RuntimeContext, type TaskOptions } from './base-operator.ts';

/*
 * Human-in-the-loop operators (Airflow 3.1's HITL operators), built on BaseOperator.awaitInput():
 * each asks a person, waits in `awaiting_input` with no worker slot and no trigger row, and
 * resumes with the response. The response (who, when, what) is each one's return value, for
 * downstream tasks to read with xcomPull.
 */

/** What every human-input operator takes besides its question. */
export interface HumanInputOptions extends TaskOptions {
  /** One line: what is asked. */
  readonly subject: string;
  /** More text (plain). */
  readonly body?: string;
  /** How long to wait (Duration or seconds); none: for as long as it takes. */
  readonly timeout?: DurationInput | null;
  /** Called with the question's signed link once it is recorded: send it to a person (mail, chat, a webhook). */
  readonly onAwaitingInput?: OnAwaitingInput;
}

abstract class HumanInputOperator<Options extends HumanInputOptions> extends BaseOperator<RuntimeContext> {
  constructor(protected readonly options: Options) {
    super(options);
    if (typeof options.subject !== 'string' || options.subject.trim() === '')
      throw new InvalidDagError(`${this.constructor.name} ${options.taskId}: subject must be a non-empty string`);
  }

  protected ask(
    context: RuntimeContext,
    question: {
      options?: readonly string[];
      multiple?: boolean;
      fields?: readonly InputField[];
      defaults?: { chosen?: readonly string[]; values?: JsonObject };
    },
  ): Promise<never> {
    const { subject, body, timeout, onAwaitingInput } = this.options;
    return this.awaitInput(context, {
      subject,
      ...(body === undefined ? {} : { body }),
      ...question,
      ...(timeout === undefined ? {} : { timeout }),
      ...(onAwaitingInput === undefined ? {} : { onAwaitingInput }),
      method: 'responded',
    });
  }

  /** Where the task resumes with the response. */
  abstract responded(context: RuntimeContext, response: InputResponse): unknown;
}

/** ApprovalOperator's options. */
export interface ApprovalOptions extends HumanInputOptions {
  /** What the timeout answers; none: the task fails at the timeout (DF_INPUT_TIMEOUT). */
  readonly defaultOutcome?: 'approve' | 'reject';
  /** What a rejection does: skip the task (its downstream tasks follow their trigger rules), or fail it. Default skip. */
  readonly onReject?: 'skip' | 'fail';
}

/**
 * Asks a person to approve or reject. Approved: the task succeeds, returning the response.
 * Rejected: it is skipped (or failed, `onReject: 'fail'`), so downstream tasks do not run.
 */
export class ApprovalOperator extends HumanInputOperator<ApprovalOptions> {
  /** Asks: approve or reject. */
  execute(context: RuntimeContext): Promise<never> {
    const outcome = this.options.defaultOutcome;
    return this.ask(context, { options: ['approve', 'reject'], ...(outcome === undefined ? {} : { defaults: { chosen: [outcome] } }) });
  }

  /** Approved: returns the response; rejected: skips or fails the task. */
  responded(_context: RuntimeContext, response: InputResponse): InputResponse {
    if (response.chosen[0] === 'approve') return response;
    const why = `rejected by ${response.by} at ${response.at}`;
    if (this.options.onReject === 'fail') this.fail(why);
    this.skip(why);
  }
}

/** BranchChoiceOperator's options. */
export interface BranchChoiceOptions extends HumanInputOptions {
  /** The direct downstream tasks a person chooses among (task ids). */
  readonly branches: readonly string[];
  /** Whether several may be chosen. Default false. */
  readonly multiple?: boolean;
  /** What the timeout chooses; none: the task fails at the timeout (DF_INPUT_TIMEOUT). */
  readonly defaultBranches?: readonly string[];
}

/**
 * A person picks which downstream tasks run: the chosen branches run, the task's other direct
 * downstream tasks are skipped (a join after them wants `triggerRule: 'none_failed'`).
 */
export class BranchChoiceOperator extends HumanInputOperator<BranchChoiceOptions> {
  constructor(options: BranchChoiceOptions) {
    super(options);
    if (!Array.isArray(options.branches) || options.branches.length === 0)
      throw new InvalidDagError(`BranchChoiceOperator ${options.taskId}: branches must list the downstream task ids to choose among`);
  }

  /** Asks which branches to follow. */
  execute(context: RuntimeContext): Promise<never> {
    const { branches, multiple, defaultBranches } = this.options;
    return this.ask(context, {
      options: branches,
      multiple: multiple ?? false,
      ...(defaultBranches === undefined ? {} : { defaults: { chosen: defaultBranches } }),
    });
  }

  /** Follows the branches chosen (the others are skipped); returns the response. */
  responded(_context: RuntimeContext, response: InputResponse): unknown {
    return this.branch(response.chosen, response);
  }
}

/** InputOperator's options. */
export interface InputOperatorOptions extends HumanInputOptions {
  /** The form: text, number, boolean or choice fields, each with an optional default. */
  readonly fields: readonly InputField[];
  /** Whether the timeout submits the form as its defaults fill it; false: the task fails at the timeout. Default false. */
  readonly submitDefaultsOnTimeout?: boolean;
}

/** Asks a person to fill a small form; returns the response, its field values under `values`. */
export class InputOperator extends HumanInputOperator<InputOperatorOptions> {
  /** Asks for the form. */
  execute(context: RuntimeContext): Promise<never> {
    return this.ask(context, { fields: this.options.fields, ...(this.options.submitDefaultsOnTimeout ? { defaults: { values: {} } } : {}) });
  }

  /** Returns the response. */
  responded(_context: RuntimeContext, response: InputResponse): InputResponse {
    return response;
  }
}
