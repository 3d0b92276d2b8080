import type { InputQuestion, InputResponse } from '../model/human-input.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import { askForInput, type AskResult } from './ask-for-input.ts';
import { awaitInput, type AwaitInputResult } from './await-input.ts';
import type { StorageContext } from './context.ts';
import type { HeldTry } from './held-try.ts';
import { inputLinkSecret } from './link-secret.ts';
import { listAwaitingInput, readTaskInput, type TaskInput } from './read-task-input.ts';
import { respondToInput, type GivenResponse } from './respond-to-input.ts';
import { timeOutAwaitedInput, type InputTimeouts } from './time-out-awaited-input.ts';

/** Human input: askForInput, awaitInput, respondToInput, timeOutAwaitedInput, readTaskInput, listAwaitingInput, inputLinkSecret. */
export class InputStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  askForInput(
    ask: { readonly taskInstanceId: number; readonly held: HeldTry; readonly question: InputQuestion; readonly timeoutMs: number | null },
    now = Date.now(),
  ): Promise<AskResult> {
    return askForInput(this.#context, ask, now);
  }

  awaitInput(
    taskInstanceId: number,
    held: HeldTry,
    resume: { readonly method: string; readonly kwargs: JsonObject },
    now = Date.now(),
  ): Promise<AwaitInputResult> {
    return awaitInput(this.#context, taskInstanceId, held, resume, now);
  }

  respondToInput(given: GivenResponse, now = Date.now()): Promise<InputResponse> {
    return respondToInput(this.#context, given, now);
  }

  timeOutAwaitedInput(now = Date.now()): Promise<InputTimeouts> {
    return timeOutAwaitedInput(this.#context, now);
  }

  readTaskInput(taskInstanceId: number): Promise<TaskInput | null> {
    return readTaskInput(this.#context, taskInstanceId);
  }

  listAwaitingInput(limit = 100): ReturnType<typeof listAwaitingInput> {
    return listAwaitingInput(this.#context, limit);
  }

  inputLinkSecret(now = Date.now()): Promise<Buffer> {
    return inputLinkSecret(this.#context, now);
  }
}
