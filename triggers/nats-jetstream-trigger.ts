import type * as JetStreamModule from '@nats-io/jetstream';
import type * as NatsTransport from '@nats-io/transport-node';
import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent, WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import type { UpstreamContext, UpstreamMessage, UpstreamSource } from '../src/authoring/triggers/upstream-hub.ts';
import { connectionFromEnv } from '../src/authoring/connections/connections.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { optionalPackage } from '../src/vocabulary/lazy-package.ts';
import type { JsonObject, JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkBatch, checkConnectionName, checkKwargFields, sharedFlag } from './kwarg-checks.ts';
import { inBatches, matchFilter, watcherCapacity } from './shared-stream.ts';
import { defaultConsumerName } from './consumer-name.ts';
import { describeValue } from './date-time-trigger.ts';

// Optional peer dependencies: only users of this trigger install them (see docs/events.md).
const transport = optionalPackage<typeof NatsTransport>('@nats-io/transport-node', 'NatsJetStreamTrigger');
const jetStream = optionalPackage<typeof JetStreamModule>('@nats-io/jetstream', 'NatsJetStreamTrigger');
type NatsConnection = Awaited<ReturnType<typeof NatsTransport.connect>>;
type JsMsg = JetStreamModule.JsMsg;

export interface NatsJetStreamTriggerKwargs {
  /** A named connection (DEFERFLOW_CONN_<NAME>) whose URL is nats:// or tls:// (user and password, or a token, in it). Its URL is never stored. */
  readonly connection: string;
  /** The JetStream stream's name. */
  readonly stream: string;
  /** Only messages on this subject (wildcards `*` and `>` allowed). @default every subject of the stream */
  readonly subject?: string;
  /** Only a message whose body matches fires (a subset match, as SignalTrigger's `match`); absent: any. */
  readonly match?: JsonValue;
  /**
   * A wait reads the messages stored from this moment on (ISO 8601). @default the moment the
   * trigger is made: no message stored after the task deferred is missed, whichever triggerer runs it.
   */
  readonly after?: string;
  /**
   * A watcher's durable consumer, made if missing. @default `deferflow`, or with `subject` or
   * `match` `deferflow-<hash of them>`: watchers with different filters each see every message
   */
  readonly consumer?: string;
  /** Where a watcher's new durable consumer starts: `new`, messages stored from then on; `all`, the whole stream. @default 'new' */
  readonly start?: 'new' | 'all';
  /** Messages fetched at once, and handed over in one batch by a watcher. @default 100 */
  readonly batch?: number;
  /** Longest one fetch waits for messages, in seconds (at least 1). @default 5 */
  readonly block?: number;
  /** Seconds before the server delivers again a message a watcher has not acknowledged (its triggerer died). @default 30 */
  readonly ackWait?: number;
  /**
   * A watcher reads through the triggerer's one shared reader of the stream and subject (with the
   * waits and other shared watchers on it), from its cursor, instead of through a durable consumer:
   * its position is the cursor deferflow commits with its runs, so nothing is acknowledged. @default false
   */
  readonly shared?: boolean;
}

/** What a message event carries: its stream, subject, stream sequence and body (JSON if it parses, else text). */
export interface NatsJetStreamMessage extends JsonObject {
  readonly stream: string;
  readonly subject: string;
  readonly seq: number;
  readonly message: JsonValue;
}

/** Pause before fetching again after a failed fetch (the client reconnects meanwhile). */
const RETRY_PAUSE_MS = 500;

/**
 * Messages of a NATS JetStream stream (uses `@nats-io/transport-node` and `@nats-io/jetstream`,
 * optional peer dependencies).
 *
 * As a wait (a task defers on it): an ordered consumer reads the messages stored from `after` on
 * (by default the moment the trigger was made) and fires with the first whose body matches
 * `match`: `{ stream, subject, seq, message }`. As a watcher (a DAG scheduled on it): fetches
 * through durable consumer `consumer`, hands over each batch of matching messages (key
 * `<stream>:<seq>`) and acknowledges them only once their runs are committed; a batch a dead
 * triggerer (or a lost connection) left unacknowledged is delivered again by the server after
 * `ackWait`, and its keys keep it from making second runs.
 */
export class NatsJetStreamTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.NatsJetStreamTrigger';
  readonly connection: string;
  readonly stream: string;
  readonly subject: string | undefined;
  readonly match: JsonValue | undefined;
  readonly after: string;
  readonly consumer: string;
  readonly start: 'new' | 'all';
  readonly batch: number;
  readonly block: number;
  readonly ackWait: number;
  readonly shared: boolean;
  #connection: NatsConnection | null = null;

  constructor(kwargs: NatsJetStreamTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('NatsJetStreamTrigger', why);
    checkKwargFields(
      kwargs,
      '{ connection, stream, … }',
      ['connection', 'stream', 'subject', 'match', 'after', 'consumer', 'start', 'batch', 'block', 'ackWait', 'shared'],
      invalid,
    );
    const {
      connection,
      stream,
      subject,
      match,
      after = new Date().toISOString(),
      consumer = defaultConsumerName('deferflow', [kwargs.subject, kwargs.match]),
      start = 'new',
      batch = 100,
      block = 5,
      ackWait = 30,
    } = kwargs;
    checkConnectionName(connection, invalid);
    // Stream and consumer names: no whitespace, dots, wildcards or path separators (the server's rule).
    const NAME = /^[^\s.*>/\\]+$/;
    if (typeof stream !== 'string' || !NAME.test(stream)) throw invalid(`stream ${describeValue(stream)} is not a stream name (no spaces, ".", "*", ">")`);
    if (subject !== undefined && (typeof subject !== 'string' || subject === '' || /\s/.test(subject)))
      throw invalid(`subject ${describeValue(subject)} is not a subject`);
    if (typeof after !== 'string' || Number.isNaN(Date.parse(after))) throw invalid(`after ${describeValue(after)} is not an ISO 8601 moment`);
    if (typeof consumer !== 'string' || !NAME.test(consumer))
      throw invalid(`consumer ${describeValue(consumer)} is not a consumer name (no spaces, ".", "*", ">")`);
    if (start !== 'new' && start !== 'all') throw invalid(`start ${describeValue(start)} must be "new" (messages from then on) or "all" (the whole stream)`);
    checkBatch(batch, invalid);
    if (typeof block !== 'number' || !(block >= 1) || block > 60) throw invalid(`block ${describeValue(block)} is not a number of seconds from 1 to 60`);
    if (typeof ackWait !== 'number' || !(ackWait >= 1) || ackWait > 3600)
      throw invalid(`ackWait ${describeValue(ackWait)} is not a number of seconds from 1 to 3600`);
    this.connection = connection;
    this.stream = stream;
    this.subject = subject;
    this.match = match;
    this.after = new Date(after).toISOString();
    this.consumer = consumer;
    this.start = start;
    this.batch = batch;
    this.block = block;
    this.ackWait = ackWait;
    this.shared = sharedFlag(kwargs.shared, invalid);
  }

  override serialize(): SerializedTrigger {
    return { classpath: NatsJetStreamTrigger.classpath, kwargs: this.#kwargs(true) };
  }

  /** A watcher reads through its durable consumer: the wait's starting moment is no part of it (and would make a new row each time the DAG is processed). */
  override serializeAsWatcher(): SerializedTrigger {
    return { classpath: NatsJetStreamTrigger.classpath, kwargs: this.#kwargs(false) };
  }

  /** Its durable consumer; a shared watcher reads through none (its cursor is its own). */
  override watcherConsumer(): string | undefined {
    return this.shared ? undefined : `nats:${this.connection}:${this.stream}:consumer:${this.consumer}`;
  }

  #kwargs(withAfter: boolean): JsonObject {
    return {
      connection: this.connection,
      stream: this.stream,
      ...(this.subject === undefined ? {} : { subject: this.subject }),
      ...(this.match === undefined ? {} : { match: this.match }),
      ...(withAfter ? { after: this.after } : {}),
      consumer: this.consumer,
      start: this.start,
      batch: this.batch,
      block: this.block,
      ackWait: this.ackWait,
      ...(this.shared ? { shared: true } : {}),
    };
  }

  override describeWait(): string {
    return `stream ${this.stream}${this.subject === undefined ? '' : ` subject ${this.subject}`}${this.match === undefined ? '' : ` matching ${JSON.stringify(this.match)}`}`;
  }

  // No `signal` parameter (a wait needs none), and a wait's generator returned as it is (see RedisStreamTrigger.run).
  run(): AsyncGenerator<TriggerEvent | WatchEvents> {
    if (!this.watching) return this.#wait();
    return this.shared ? this.#watchShared() : this.#watchOwnConnection();
  }

  /**
   * A shared watcher: the matching messages after its cursor from the triggerer's shared reader,
   * handed over `batch` at a time, each batch's last position its cursor. With no cursor yet it
   * starts at `start` and writes that position first, so that a restart before its first event
   * misses nothing.
   */
  async *#watchShared(): AsyncGenerator<WatchEvents> {
    let since = (this.cursor as { position?: string } | null)?.position;
    if (since === undefined) {
      since = this.start === 'all' ? '0:0' : `${Date.now() - 1}:${Number.MAX_SAFE_INTEGER}`;
      yield new WatchEvents([], { stream: this.stream, position: since });
    }
    const upstream = this.readUpstream(
      new NatsStreamUpstream(this.connection, this.stream, this.subject, this.batch, this.block),
      matchFilter(since, this.match, watcherCapacity(this.batch)),
    );
    yield* inBatches(
      upstream,
      this.batch,
      (message) => {
        const { subject, seq } = message.meta as { subject: string; seq: number };
        return { key: `${this.stream}:${seq}`, payload: { stream: this.stream, subject, seq, message: message.body } satisfies NatsJetStreamMessage };
      },
      (last) => ({ stream: this.stream, seq: (last.meta as { seq: number }).seq, position: last.position }),
    );
  }

  async *#watchOwnConnection(): AsyncGenerator<WatchEvents> {
    const connection = await connectNats(this.connection);
    this.#connection = connection;
    yield* this.#watch(connection, this.signal);
  }

  override async cleanup(): Promise<void> {
    // Ends a fetch waiting on the server at once, rather than when it expires.
    const connection = this.#connection;
    this.#connection = null;
    await connection?.close();
  }

  /** A wait: the first matching message stored from `after` on, from the triggerer's one reader of the stream (and subject). */
  async *#wait(): AsyncGenerator<TriggerEvent> {
    const upstream = this.readUpstream(
      new NatsStreamUpstream(this.connection, this.stream, this.subject, this.batch, this.block),
      // Stored from `after` on: after every message of the millisecond before.
      matchFilter(`${Date.parse(this.after) - 1}:${Number.MAX_SAFE_INTEGER}`, this.match),
    );
    const first = await upstream.first();
    const { subject, seq } = first.meta as { subject: string; seq: number };
    yield new TriggerEvent({ stream: this.stream, subject, seq, message: first.body } satisfies NatsJetStreamMessage);
  }

  async *#watch(connection: NatsConnection, signal: AbortSignal): AsyncGenerator<WatchEvents> {
    const { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } = jetStream();
    const manager = await jetstreamManager(connection);
    try {
      await manager.consumers.info(this.stream, this.consumer);
    } catch (error) {
      if (!/consumer not found/i.test(String((error as Error).message))) throw error;
      await manager.consumers.add(this.stream, {
        durable_name: this.consumer,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: this.start === 'all' ? DeliverPolicy.All : DeliverPolicy.New,
        ...(this.subject === undefined ? {} : { filter_subject: this.subject }),
        ack_wait: this.ackWait * 1_000_000_000,
      });
    }
    const consumer = await jetstream(connection).consumers.get(this.stream, this.consumer);
    while (!signal.aborted && this.#connection !== null) {
      const entries: JsMsg[] = [];
      try {
        const fetched = await consumer.fetch({ max_messages: this.batch, expires: this.block * 1000 });
        for await (const entry of fetched) entries.push(entry);
      } catch (error) {
        if (signal.aborted || this.#connection === null) return;
        // What was fetched and not acknowledged comes again after ackWait: nothing is lost.
        this.log.warn({ stream: this.stream, error: (error as Error).message }, `nats stream ${this.stream}: fetch failed; fetching again`);
        await this.sleep(RETRY_PAUSE_MS);
        continue;
      }
      if (entries.length === 0) continue;
      const events = entries.map((entry) => this.#event(entry)).filter((event) => this.#matches(event));
      yield new WatchEvents(
        events.map((event) => ({ key: `${this.stream}:${event.seq}`, payload: event })),
        { stream: this.stream, seq: entries.at(-1)!.seq },
      );
      // Committed: acknowledged. One lost with the connection is delivered again and makes no second run.
      await Promise.all(entries.map((entry) => entry.ackAck().catch(() => false)));
    }
  }

  #event(entry: JsMsg): NatsJetStreamMessage {
    return { stream: this.stream, subject: entry.subject, seq: entry.seq, message: bodyOf(entry) };
  }

  #matches(event: NatsJetStreamMessage): boolean {
    return this.match === undefined || matches(event.message, this.match);
  }
}

/** A connection to the named connection's server, reconnecting by itself for as long as it is open. */
function connectNats(connectionName: string): Promise<NatsConnection> {
  return transport().connect({ ...connectOptions(connectionFromEnv(connectionName).url), maxReconnectAttempts: -1, reconnectTimeWait: 500, name: 'deferflow' });
}

/** A message's body: JSON if it parses, else its text. */
function bodyOf(entry: JsMsg): JsonValue {
  const text = entry.string();
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return text;
  }
}

/**
 * One ordered consumer of a stream (and subject) for every wait on it in a triggerer (see
 * UpstreamHub). Positions are `<ms>:<seq>`, the time the server stored a message and its sequence,
 * so that a wait's start (a moment) and the messages read order alike; a wait that joins behind the
 * reader reads what it missed with an ordered consumer of its own, up to the reader's position.
 */
class NatsStreamUpstream implements UpstreamSource {
  readonly key: string;
  #connection: Promise<NatsConnection> | null = null;

  constructor(
    readonly connection: string,
    readonly stream: string,
    readonly subject: string | undefined,
    readonly batch: number,
    readonly block: number,
  ) {
    this.key = `nats:${connection}:${stream}:${subject ?? '>'}`;
  }

  compare(a: string, b: string): number {
    const [aMs = 0, aSeq = 0] = a.split(':').map(Number);
    const [bMs = 0, bSeq = 0] = b.split(':').map(Number);
    return aMs - bMs || aSeq - bSeq;
  }

  async head(): Promise<string> {
    // Connected first: a project missing both clients is told of the transport first, as a watcher tells it.
    const connection = await this.#connect();
    const { jetstreamManager } = jetStream();
    const info = await (await jetstreamManager(connection)).streams.info(this.stream);
    return info.state.last_seq === 0 ? '0:0' : `${Date.parse(info.state.last_ts)}:${info.state.last_seq}`;
  }

  async *read(from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage[]> {
    const messages = await (await this.#consumerFrom(from)).consume({ max_messages: this.batch, expires: this.block * 1000 });
    const stop = () => void messages.close();
    context.signal.addEventListener('abort', stop, { once: true });
    try {
      for await (const entry of messages) yield [this.#message(entry)];
    } finally {
      stop();
    }
  }

  async range(after: string, upTo: string): Promise<readonly UpstreamMessage[]> {
    const found: UpstreamMessage[] = [];
    const consumer = await this.#consumerFrom(after);
    // Nothing stored since: none to read (a consume would wait for the next message).
    if ((await consumer.info()).num_pending === 0) return found;
    const messages = await consumer.consume({ max_messages: this.batch, expires: this.block * 1000 });
    try {
      for await (const entry of messages) {
        const message = this.#message(entry);
        if (this.compare(message.position, upTo) > 0) break;
        found.push(message);
        // The last stored on this subject, or the reader's position reached: the rest is the reader's.
        if (entry.info.pending === 0 || this.compare(message.position, upTo) === 0) break;
      }
    } finally {
      void messages.close();
    }
    return found;
  }

  async close(): Promise<void> {
    const connection = await this.#connection?.catch(() => null);
    this.#connection = null;
    await connection?.close();
  }

  #connect(): Promise<NatsConnection> {
    this.#connection ??= connectNats(this.connection);
    return this.#connection;
  }

  /** An ordered consumer (made by the client, made again at the right sequence after a lost connection) from after `position`. */
  async #consumerFrom(position: string) {
    const { jetstream, DeliverPolicy } = jetStream();
    const [ms = 0, seq = 0] = position.split(':').map(Number);
    return jetstream(await this.#connect()).consumers.get(this.stream, {
      ...(this.subject === undefined ? {} : { filter_subjects: this.subject }),
      // After a message read: the next sequence; after a moment: what was stored from the next millisecond on.
      ...(seq > 0 && seq < Number.MAX_SAFE_INTEGER
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: seq + 1 }
        : { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(ms + 1).toISOString() }),
    });
  }

  #message(entry: JsMsg): UpstreamMessage {
    return { position: `${entry.time.getTime()}:${entry.seq}`, body: bodyOf(entry), meta: { subject: entry.subject, seq: entry.seq } };
  }
}

/** The client's options from a connection URL: its server, and the user and password (or token) in it. */
function connectOptions(url: string): { servers: string; user?: string; pass?: string; token?: string } {
  const parsed = new URL(url);
  const servers = `${parsed.protocol}//${parsed.host}`;
  const user = decodeURIComponent(parsed.username);
  const pass = decodeURIComponent(parsed.password);
  if (user !== '' && pass !== '') return { servers, user, pass };
  if (user !== '') return { servers, token: user };
  return { servers };
}
