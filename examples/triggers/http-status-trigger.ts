import { BaseTrigger, InvalidTriggerArgumentError, TriggerEvent, type SerializedTrigger } from 'deferflow';

export interface HttpStatusKwargs {
  readonly url: string;
  /** The status that ends the wait. */
  readonly status: number;
  /** Seconds between two requests. */
  readonly pollSeconds: number;
}

/**
 * Fires once `url` answers with `status`: a custom trigger, loaded on a triggerer with
 * `--trigger-module examples/triggers/http-status-trigger.ts`.
 */
export class HttpStatusTrigger extends BaseTrigger {
  static readonly classpath = 'examples.HttpStatusTrigger';

  readonly kwargs: HttpStatusKwargs;

  // The triggerer rebuilds the trigger with `new HttpStatusTrigger(kwargs)` from the stored
  // JSON, so the constructor validates: a bad row fails its own task instances, nothing else.
  constructor(kwargs: { url: string; status?: number; pollSeconds?: number }) {
    super();
    if (typeof kwargs?.url !== 'string' || !/^https?:\/\//.test(kwargs.url)) {
      throw new InvalidTriggerArgumentError('HttpStatusTrigger', `url must be an http(s) URL, got ${JSON.stringify(kwargs?.url)}`);
    }
    const pollSeconds = kwargs.pollSeconds ?? 30;
    if (!(pollSeconds > 0)) throw new InvalidTriggerArgumentError('HttpStatusTrigger', `pollSeconds must be > 0, got ${pollSeconds}`);
    this.kwargs = { url: kwargs.url, status: kwargs.status ?? 200, pollSeconds };
  }

  override serialize(): SerializedTrigger {
    return { classpath: HttpStatusTrigger.classpath, kwargs: { ...this.kwargs } };
  }

  // run(signal): the signal aborts when the trigger is cancelled, and fetch() stops with it.
  override async *run(signal: AbortSignal): AsyncGenerator<TriggerEvent<{ url: string; status: number }>> {
    for (;;) {
      const response = await fetch(this.kwargs.url, { signal }).catch((error: unknown) => {
        if (signal.aborted) throw error;
        return null; // unreachable for now: try again next poll
      });
      await response?.body?.cancel();
      if (response?.status === this.kwargs.status) {
        yield new TriggerEvent({ url: this.kwargs.url, status: response.status });
        return;
      }
      // this.sleep joins the triggerer's one shared timer: no timer object per trigger.
      await this.sleep(this.kwargs.pollSeconds * 1000);
    }
  }
}
