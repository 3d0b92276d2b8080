import type { Database } from '../../database/connect.ts';
import type { InputResponse, InputSource } from '../../model/human-input.ts';
import { openStores, type AskedInput, type Stores, type TaskInput } from '../../storage/index.ts';
import { InputLinkInvalidError } from '../../vocabulary/errors.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import { inputLinkUrl, signInputToken, verifyInputToken } from './input-links.ts';

/** What a person answers, with who they are. */
export interface GivenAnswer {
  /** The options chosen (by name). */
  readonly chosen?: readonly string[];
  /** The form's values, by field name. */
  readonly values?: JsonObject;
  /** Who responds (a name, an email address): recorded with the response. */
  readonly by: string;
}

/**
 * Human input as every way in uses it (the worker making links; the CLI, the HTTP API, the
 * embedded API, the status page and signed links answering): links signed with the
 * deployment's key, responses checked and recorded by storage/respond-to-input.ts.
 */
export class InputService {
  readonly #stores: Pick<Stores, 'inputs'>;
  #key: Promise<Buffer> | null = null;

  constructor(stores: Pick<Stores, 'inputs'>) {
    this.#stores = stores;
  }

  /** The service over an open database's stores. */
  static of(database: Pick<Database, 'db' | 'adapter' | 'keyring'>): InputService {
    return new InputService(openStores(database));
  }

  /** The token of a signed link to a question as asked, valid until its timeout. */
  async tokenFor(asked: AskedInput): Promise<string> {
    return signInputToken(await this.#linkKey(), {
      taskInstanceId: asked.taskInstanceId,
      tryNumber: asked.tryNumber,
      nonce: asked.nonce,
      expiresAt: asked.timeoutAt,
    });
  }

  /** The URL of a signed link: the status page's `/input/<token>` under `publicUrl`. */
  async linkFor(asked: AskedInput, publicUrl: string): Promise<string> {
    return inputLinkUrl(publicUrl, await this.tokenFor(asked));
  }

  /**
   * The question a link was made for, while it is asked: throws DF_INPUT_LINK_INVALID for a
   * tampered or expired link, or one made for a question no longer asked. An answered question
   * is returned with its response (its page says who answered and when).
   */
  async questionOfLink(token: string, now = Date.now()): Promise<TaskInput> {
    const claims = verifyInputToken(await this.#linkKey(), token, now);
    const input = await this.#stores.inputs.readTaskInput(claims.taskInstanceId);
    if (!input || input.tryNumber !== claims.tryNumber || input.nonce !== claims.nonce)
      throw new InputLinkInvalidError(
        `this link is no longer valid: task instance ${claims.taskInstanceId} asks another question now, or none (cleared or retried); nothing was recorded`,
        'stale',
      );
    return input;
  }

  /** Answers the question a signed link was made for (see respondToInput for what is refused). */
  async respondByLink(token: string, answer: GivenAnswer, now = Date.now()): Promise<InputResponse> {
    const claims = verifyInputToken(await this.#linkKey(), token, now);
    return this.#stores.inputs.respondToInput(
      {
        taskInstanceId: claims.taskInstanceId,
        link: { tryNumber: claims.tryNumber, nonce: claims.nonce },
        chosen: answer.chosen ?? [],
        values: answer.values ?? {},
        by: answer.by,
        source: 'link',
      },
      now,
    );
  }

  /** Answers a task instance's question, by its id (the CLI, the HTTP API, the embedded API, the status page's operators). */
  respond(
    taskInstanceId: number,
    answer: GivenAnswer,
    source: Extract<InputSource, 'cli' | 'http' | 'api' | 'page'>,
    now = Date.now(),
  ): Promise<InputResponse> {
    return this.#stores.inputs.respondToInput({ taskInstanceId, chosen: answer.chosen ?? [], values: answer.values ?? {}, by: answer.by, source }, now);
  }

  /** The question of a task instance, or null when it asks none. */
  question(taskInstanceId: number): Promise<TaskInput | null> {
    return this.#stores.inputs.readTaskInput(taskInstanceId);
  }

  #linkKey(): Promise<Buffer> {
    // Read once per service; a failed read is tried again next time.
    this.#key ??= this.#stores.inputs.inputLinkSecret().catch((error: unknown) => {
      this.#key = null;
      throw error;
    });
    return this.#key;
  }
}
