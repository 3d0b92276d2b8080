import { TriggerFailedError, UpstreamOverflowError } from '../../vocabulary/errors.ts';
import { canonicalJson, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';

/** One message of a shared upstream: where it stands in its stream, and its body, which filters read. */
export interface UpstreamMessage<B extends JsonValue = JsonValue> {
  /** Its place in the stream (a Redis stream id, a sequence number as text); ordered by the source's compare(). */
  readonly position: string;
  /** What the message says, as JSON (a broker's body parsed): what filters read. */
  readonly body: B;
  /** What it carries besides its body (the topic it came on, its id): for the event, not for filters. */
  readonly meta?: JsonObject;
}

/**
 * A stream that many triggers read at once: per triggerer, one reader per `key` feeds every trigger
 * that subscribes with a source of that key, each through its own filter. A source is a
 * description; it opens connections only when the hub starts reading it, and the hub uses the first
 * subscriber's source for the key, so everything that changes what is read belongs in the key.
 */
export interface UpstreamSource<B extends JsonValue = JsonValue> {
  /** Names the stream, its connection and how its bodies are read: equal keys share one reader. */
  readonly key: string;
  /** Orders two positions: negative when `a` comes first, 0 when equal. */
  compare(a: string, b: string): number;
  /** The position of the stream's latest message (or the position before the first, when empty). */
  head(context: UpstreamContext): Promise<string>;
  /** The messages after `from` as they come, batch by batch, until the context's signal aborts (lost connections waited out). */
  read(from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage<B>[]>;
  /** The stored messages after `after`, up to and including `upTo`: what a late subscriber missed. */
  range(after: string, upTo: string, context: UpstreamContext): Promise<readonly UpstreamMessage<B>[]>;
  /** Releases what read() and range() opened; the reader has stopped. */
  close?(): Promise<void>;
}

/** What a source's calls are given: the reader's life, and where to say what it waits out. */
export interface UpstreamContext {
  /** Aborts when the reader stops. */
  readonly signal: AbortSignal;
  /** A warning in the triggerer's log (a lost connection being waited out). */
  warn(message: string): void;
}

/** What one subscriber takes from a shared upstream. */
export interface UpstreamFilter<B extends JsonValue = JsonValue> {
  /** Only messages after this position are the subscriber's; null: those after the moment it joins. */
  readonly since: string | null;
  /** Whether a message is the subscriber's. */
  readonly accept: (message: UpstreamMessage<B>) => boolean;
  /**
   * A top-level field of the body that accept() requires to equal `value` (JSON equality): the
   * reader then looks the subscriber up by it rather than asking it about every message, so 10,000
   * subscribers waiting for their own order cost a map lookup a message, not 10,000 calls.
   */
  readonly probe?: { readonly field: string; readonly value: JsonValue };
  /** Matching messages held for a subscriber that has not taken them before it fails (DF_UPSTREAM_OVERFLOW). @default 1000 */
  readonly capacity?: number;
}

/** A subscriber's side: its matching messages in stream order. */
export interface UpstreamSubscription<B extends JsonValue = JsonValue> {
  /** Every matching message waiting (at least one, in stream order); rejects with the reader's failure or DF_UPSTREAM_OVERFLOW. */
  next(): Promise<readonly UpstreamMessage<B>[]>;
  /**
   * The first matching message (a wait's one message), after which the subscription leaves the
   * upstream; rejects as next() does. Cheaper than next() and close() in an async function of
   * one's own: thousands of waits hold nothing more than this promise.
   */
  first(): Promise<UpstreamMessage<B>>;
  /** Leaves the upstream; the reader stops once no subscriber is left (after a linger). */
  close(): void;
}

/** A subscription as its owner (the trigger's run) holds it: it can also be cancelled. */
export interface HubSubscription<B extends JsonValue = JsonValue> extends UpstreamSubscription<B> {
  /** Whether it left the upstream (closed, cancelled, or its first() answered). */
  readonly closed: boolean;
  /** Leaves the upstream, rejecting a next() or first() waiting, and any to come, with `reason` (the trigger was cancelled). */
  cancel(reason: unknown): void;
}

export interface UpstreamHubOptions {
  /** How long a reader stays open with no subscriber, for the next wait on the same stream. @default 5000 */
  readonly lingerMs?: number;
  /** Told when a reader fails (its subscribers all fail with the error). */
  readonly onReaderError?: (key: string, error: unknown) => void;
  /** Where sources' warnings go (a lost connection waited out). */
  readonly warn?: (key: string, message: string) => void;
}

const DEFAULT_CAPACITY = 1000;

/**
 * One reader per upstream key for any number of subscribers (see UpstreamSource). A reader starts
 * a moment after its first subscriber joins, so that the subscribers a triggerer starts together
 * (a restart, a takeover) are read from the earliest of their positions by one read; a subscriber
 * that joins once the reader is past its position first gets what it missed from the stream's
 * history (range), then the live messages. A subscriber that does not take its messages fails
 * alone when its queue is full; the reader never waits for anyone.
 */
export class UpstreamHub {
  readonly #readers = new Map<string, UpstreamReader>();
  readonly #lingerMs: number;
  readonly #onReaderError: (key: string, error: unknown) => void;
  readonly #warn: (key: string, message: string) => void;

  constructor(options: UpstreamHubOptions = {}) {
    this.#lingerMs = options.lingerMs ?? 5000;
    this.#onReaderError = options.onReaderError ?? (() => {});
    this.#warn = options.warn ?? (() => {});
  }

  /** Readers open (one per key in use). */
  get readerCount(): number {
    return this.#readers.size;
  }

  subscribe<B extends JsonValue>(source: UpstreamSource<B>, filter: UpstreamFilter<B>): HubSubscription<B> {
    let reader = this.#readers.get(source.key);
    if (!reader) {
      reader = new UpstreamReader(
        source as unknown as UpstreamSource,
        this.#lingerMs,
        (failed, error) => {
          if (this.#readers.get(source.key) === failed) this.#readers.delete(source.key);
          if (error !== undefined) this.#onReaderError(source.key, error);
        },
        (message) => this.#warn(source.key, message),
      );
      this.#readers.set(source.key, reader);
    }
    return reader.join(filter as unknown as UpstreamFilter) as unknown as HubSubscription<B>;
  }

  /** Stops every reader (the triggerer is stopping); their subscribers are left waiting, as their triggers are being cancelled. */
  async close(): Promise<void> {
    const readers = [...this.#readers.values()];
    this.#readers.clear();
    await Promise.all(readers.map((reader) => reader.stop()));
  }
}

/*
 * A reader's life:
 *
 *   starting ──head read, position set──▶ reading ──no subscriber for lingerMs──▶ stopped
 *      └──────────────── the source fails (every subscriber fails with it) ──────▶ stopped
 */
type ReaderState = 'starting' | 'reading' | 'stopped';

class UpstreamReader {
  state: ReaderState = 'starting';
  /** The last position read (or where reading began): a joiner behind it catches up from the history. */
  position: string | null = null;
  readonly #controller = new AbortController();
  readonly #context: UpstreamContext;
  /** Subscribers without a probe: asked about every message. */
  readonly #unindexed = new Set<Subscriber>();
  /** Subscribers with a probe, by field, then by the value's canonical JSON: the one subscriber, or a Set of several. */
  readonly #indexed = new Map<string, Map<string, Subscriber | Set<Subscriber>>>();
  #count = 0;
  #linger: NodeJS.Timeout | undefined;

  constructor(
    readonly source: UpstreamSource,
    readonly lingerMs: number,
    readonly stopped: (reader: UpstreamReader, error?: unknown) => void,
    warn: (message: string) => void,
  ) {
    this.#context = { signal: this.#controller.signal, warn };
    // A moment for the subscribers started in the same burst to join: one read from the earliest.
    setImmediate(() => void this.#run());
  }

  join(filter: UpstreamFilter): HubSubscription {
    clearTimeout(this.#linger);
    const subscriber = new Subscriber(this, filter);
    this.#count++;
    if (filter.probe) {
      let byValue = this.#indexed.get(filter.probe.field);
      if (!byValue) {
        byValue = new Map();
        this.#indexed.set(filter.probe.field, byValue);
      }
      const value = canonicalJson(filter.probe.value);
      const held = byValue.get(value);
      // One subscriber a value is the common case (each waits for its own message): no Set for it.
      if (held === undefined) byValue.set(value, subscriber);
      else if (held instanceof Set) held.add(subscriber);
      else byValue.set(value, new Set([held, subscriber]));
    } else this.#unindexed.add(subscriber);
    if (this.state === 'reading') this.#placeJoiner(subscriber);
    return subscriber;
  }

  leave(subscriber: Subscriber): void {
    const probe = subscriber.filter.probe;
    let removed: boolean;
    if (probe) {
      const byValue = this.#indexed.get(probe.field);
      const value = canonicalJson(probe.value);
      const held = byValue?.get(value);
      if (held instanceof Set) {
        removed = held.delete(subscriber);
        if (held.size === 0) byValue!.delete(value);
      } else {
        removed = held === subscriber;
        if (removed) byValue!.delete(value);
      }
      if (byValue?.size === 0) this.#indexed.delete(probe.field);
    } else removed = this.#unindexed.delete(subscriber);
    if (!removed) return;
    this.#count--;
    if (this.#count === 0 && this.state !== 'stopped') {
      this.#linger = setTimeout(() => void this.stop(), this.lingerMs);
      this.#linger.unref();
    }
  }

  async stop(error?: unknown): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    clearTimeout(this.#linger);
    this.#controller.abort();
    this.stopped(this, error);
    if (error !== undefined) for (const subscriber of this.#all()) subscriber.fail(error);
    try {
      await this.source.close?.();
    } catch {
      // Closing a connection that is already gone: nothing left to release.
    }
  }

  // A method, not an inline test: the state changes across the awaits of #run().
  #isStopped(): boolean {
    return this.state === 'stopped';
  }

  *#all(): Iterable<Subscriber> {
    yield* this.#unindexed;
    for (const byValue of this.#indexed.values())
      for (const held of byValue.values()) {
        if (held instanceof Set) yield* held;
        else yield held;
      }
  }

  async #run(): Promise<void> {
    try {
      const head = await this.source.head(this.#context);
      if (this.state === 'stopped') return;
      // From the earliest position a subscriber asked for; those that asked for none start at the head.
      let from = head;
      for (const subscriber of this.#all()) {
        subscriber.since ??= head;
        if (this.source.compare(subscriber.since, from) < 0) from = subscriber.since;
      }
      this.position = from;
      this.state = 'reading';
      for await (const batch of this.source.read(from, this.#context)) {
        if (this.#isStopped()) return;
        for (const message of batch) {
          this.position = message.position;
          this.#dispatch(message);
        }
      }
      if (!this.#isStopped()) throw new TriggerFailedError(`the shared upstream ${this.source.key} ended its reading`);
    } catch (error) {
      if (this.state !== 'stopped') await this.stop(error);
    }
  }

  /** A subscriber that joins while reading: from now on, or first what it missed. */
  #placeJoiner(subscriber: Subscriber): void {
    const position = this.position!;
    subscriber.since ??= position;
    if (this.source.compare(subscriber.since, position) >= 0) return;
    subscriber.missed = [];
    this.source.range(subscriber.since, position, this.#context).then(
      (history) => {
        const live = subscriber.missed ?? [];
        subscriber.missed = null;
        for (const message of history) if (subscriber.filter.accept(message)) subscriber.deliver(message);
        for (const message of live) subscriber.deliver(message);
      },
      (error: unknown) => subscriber.fail(error),
    );
  }

  #dispatch(message: UpstreamMessage): void {
    const body = message.body;
    if (this.#indexed.size > 0 && body !== null && typeof body === 'object' && !Array.isArray(body)) {
      for (const [field, byValue] of this.#indexed) {
        const value = body[field];
        if (value === undefined) continue;
        const held = byValue.get(canonicalJson(value));
        if (held instanceof Set) for (const subscriber of held) this.#offer(subscriber, message);
        else if (held) this.#offer(held, message);
      }
    }
    for (const subscriber of this.#unindexed) this.#offer(subscriber, message);
  }

  #offer(subscriber: Subscriber, message: UpstreamMessage): void {
    if (subscriber.since !== null && this.source.compare(message.position, subscriber.since) <= 0) return;
    if (!subscriber.filter.accept(message)) return;
    if (subscriber.missed) subscriber.missed.push(message);
    else subscriber.deliver(message);
  }
}

class Subscriber implements HubSubscription {
  since: string | null;
  /** While it catches up from the history: the live messages that came meanwhile, delivered after. */
  missed: UpstreamMessage[] | null = null;
  // Made with the first message: most subscribers (waits) hold none until the one that ends them.
  #queue: UpstreamMessage[] | null = null;
  #waiter: { resolve(messages: UpstreamMessage[]): void; reject(error: unknown): void } | null = null;
  #error: unknown = undefined;
  #closed = false;
  /** Taken by first(): the waiter gets one message, and the subscription leaves once it has. */
  #once = false;

  constructor(
    readonly reader: UpstreamReader,
    readonly filter: UpstreamFilter,
  ) {
    this.since = filter.since;
  }

  deliver(message: UpstreamMessage): void {
    if (this.#closed || this.#error !== undefined) return;
    this.#queue ??= [];
    if (this.#queue.length >= (this.filter.capacity ?? DEFAULT_CAPACITY)) {
      this.fail(new UpstreamOverflowError(this.reader.source.key, this.filter.capacity ?? DEFAULT_CAPACITY));
      this.close();
      return;
    }
    this.#queue.push(message);
    this.since = message.position;
    if (this.#waiter) {
      const waiter = this.#waiter;
      this.#waiter = null;
      // Resolved on the next turn with everything queued by then: a batch's matches arrive together.
      queueMicrotask(() => waiter.resolve(this.#take()));
      if (this.#once) this.close();
    }
  }

  fail(error: unknown): void {
    if (this.#error !== undefined) return;
    this.#error = error;
    this.#waiter?.reject(error);
    this.#waiter = null;
    if (this.#once) this.close();
  }

  #take(): UpstreamMessage[] {
    const messages = this.#queue ?? [];
    this.#queue = null;
    return messages;
  }

  next(): Promise<readonly UpstreamMessage[]> {
    if (this.#queue !== null && this.#queue.length > 0) return Promise.resolve(this.#take());
    if (this.#error !== undefined) return Promise.reject(this.#error);
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  first(): Promise<UpstreamMessage> {
    this.#once = true;
    if ((this.#queue !== null && this.#queue.length > 0) || this.#error !== undefined) {
      const taken = this.next();
      this.close();
      return taken.then((messages) => messages[0]!);
    }
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve: (messages) => resolve(messages[0]!), reject };
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  cancel(reason: unknown): void {
    this.fail(reason);
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#waiter = null;
    this.reader.leave(this);
  }
}

/**
 * The probe of a `match` filter (SignalTrigger's subset match): its first top-level field whose
 * expected value is not an object (matched by JSON equality, as the index looks it up); none when
 * it has no such field.
 */
export function probeOf(match: JsonValue | undefined): UpstreamFilter['probe'] {
  if (match === null || typeof match !== 'object' || Array.isArray(match)) return undefined;
  for (const [field, value] of Object.entries(match)) {
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) continue;
    return { field, value };
  }
  return undefined;
}

/**
 * The messages a client's callback hands a source (an MQTT or AMQP subscription), taken by its
 * read() as batches: everything that came since the last take.
 */
export class PushedMessages {
  #messages: UpstreamMessage[] = [];
  #wake: (() => void) | null = null;

  push(message: UpstreamMessage): void {
    this.#messages.push(message);
    this.#wake?.();
  }

  /** Ends a take() waiting, with what is there (perhaps nothing): the connection was lost, or the reader stops. */
  interrupt(): void {
    this.#wake?.();
  }

  /** Everything pushed since the last take, waiting for the first message (or an interrupt). */
  async take(): Promise<UpstreamMessage[]> {
    if (this.#messages.length === 0)
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    this.#wake = null;
    const taken = this.#messages;
    this.#messages = [];
    return taken;
  }
}
