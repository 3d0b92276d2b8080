import { createHash } from 'node:crypto';
import type * as AmqpModule from 'amqplib';
import { BaseTrigger, type SerializedTrigger, type SerializedWatcher } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent, WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import { PushedMessages, type UpstreamContext, type UpstreamMessage, type UpstreamSource } from '../src/authoring/triggers/upstream-hub.ts';
import { connectionFromEnv } from '../src/authoring/connections/connections.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { optionalPackage } from '../src/vocabulary/lazy-package.ts';
import type { JsonObject, JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkBatch, checkConnectionName, checkKwargFields, sharedFlag } from './kwarg-checks.ts';
import { matchAsEventFilter, matchFilter } from './shared-stream.ts';
import { defaultConsumerName } from './consumer-name.ts';
import { describeValue } from './date-time-trigger.ts';

// An optional peer dependency: only users of this trigger install it (see docs/events.md).
const amqplib = optionalPackage<typeof AmqpModule>('amqplib', 'RabbitMqTrigger');
type AmqpConnection = Awaited<ReturnType<typeof AmqpModule.connect>>;
type AmqpChannel = Awaited<ReturnType<AmqpConnection['createChannel']>>;
type AmqpMessage = AmqpModule.ConsumeMessage;

export interface RabbitMqTriggerKwargs {
  /** A named connection (DEFERFLOW_CONN_<NAME>) whose URL is amqp:// or amqps:// (user and password in it). Its URL is never stored. */
  readonly connection: string;
  /** An exchange of yours: a wait binds a queue of its own to it; a watcher binds its queue to it. */
  readonly exchange?: string;
  /** The binding key (on a topic exchange, `*` and `#` stand for words). @default '#' */
  readonly routingKey?: string;
  /**
   * A watcher's durable queue, declared if missing (and bound to `exchange` if given).
   * @default `deferflow.<exchange>.<routingKey>`, with `match` `.<hash of match>` after it: watchers
   * with different filters each see every message
   */
  readonly queue?: string;
  /** Only a message whose body matches fires (a subset match, as SignalTrigger's `match`); absent: any. */
  readonly match?: JsonValue;
  /**
   * A watcher's event key: this field of the (JSON) body. @default the message's `messageId`
   * property, or else a hash of routing key and body (identical bodies are then one event)
   */
  readonly keyField?: string;
  /** Messages a watcher holds unacknowledged at once (the channel's prefetch), handed over in one batch. @default 100 */
  readonly batch?: number;
  /**
   * A watcher shares one queue with the shared watchers of the other DAGs on the same exchange and
   * routing key (and connection, queue, keyField and batch), whatever their `match`: one row, one
   * queue, one consumer, each DAG's `match` applied to the events as its runs are written, and each
   * message acknowledged once the runs of every DAG are committed. Without it, a watcher with its
   * own `match` has a queue of its own. A wait ignores it (waits on an exchange always share). @default false
   */
  readonly shared?: boolean;
}

/** What a message event carries: its exchange, routing key, message id (null if none) and body (JSON if it parses, else text). */
export interface RabbitMqMessage extends JsonObject {
  readonly exchange: string;
  readonly routingKey: string;
  readonly messageId: string | null;
  readonly message: JsonValue;
}

/** Pause before connecting again after a lost connection. */
const RECONNECT_PAUSE_MS = 500;

/**
 * Messages of RabbitMQ (AMQP 0-9-1; uses `amqplib`, an optional peer dependency).
 *
 * As a wait (a task defers on it): fires with the first message whose body matches `match` from
 * the triggerer's one exclusive queue bound to `exchange` with `routingKey`, shared by every wait
 * on them (AMQP keeps no history: a message routed before the wait joined is not seen). As a watcher (a DAG
 * scheduled on it): consumes durable queue `queue` with manual acknowledgement, hands over what
 * arrived in one batch (at most `batch`) and acknowledges it only once its runs are committed;
 * what a dead triggerer or a lost connection left unacknowledged the broker delivers again, and
 * its key keeps it from making a second run. A lost connection is connected again.
 */
export class RabbitMqTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.RabbitMqTrigger';
  readonly connection: string;
  readonly exchange: string | undefined;
  readonly routingKey: string;
  readonly queue: string | undefined;
  readonly match: JsonValue | undefined;
  readonly keyField: string | undefined;
  readonly batch: number;
  readonly shared: boolean;
  #connection: AmqpConnection | null = null;
  #stopped = false;
  #wake: (() => void) | null = null;

  constructor(kwargs: RabbitMqTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('RabbitMqTrigger', why);
    checkKwargFields(
      kwargs,
      '{ connection, exchange or queue, … }',
      ['connection', 'exchange', 'routingKey', 'queue', 'match', 'keyField', 'batch', 'shared'],
      invalid,
    );
    const { connection, exchange, routingKey = '#', queue, match, keyField, batch = 100 } = kwargs;
    checkConnectionName(connection, invalid);
    const NAME = /^[A-Za-z0-9_.:-]{1,200}$/;
    if (exchange !== undefined && (typeof exchange !== 'string' || !NAME.test(exchange)))
      throw invalid(`exchange ${describeValue(exchange)} is not an exchange name (letters, digits, "_", ".", ":", "-")`);
    if (queue !== undefined && (typeof queue !== 'string' || !NAME.test(queue) || queue.startsWith('amq.')))
      throw invalid(`queue ${describeValue(queue)} is not a queue name (letters, digits, "_", ".", ":", "-"; not "amq.")`);
    if (exchange === undefined && queue === undefined) throw invalid('give an exchange (a wait binds to it) or a queue (a watcher consumes it)');
    if (typeof routingKey !== 'string' || routingKey.length > 255) throw invalid(`routingKey ${describeValue(routingKey)} is not a routing key`);
    if (keyField !== undefined && (typeof keyField !== 'string' || keyField === '')) throw invalid(`keyField ${describeValue(keyField)} is not a field name`);
    checkBatch(batch, invalid);
    this.connection = connection;
    this.exchange = exchange;
    this.routingKey = routingKey;
    this.queue = queue;
    this.match = match;
    this.keyField = keyField;
    this.batch = batch;
    this.shared = sharedFlag(kwargs.shared, invalid);
  }

  override serialize(): SerializedTrigger {
    const kwargs: JsonObject = {
      connection: this.connection,
      ...(this.exchange === undefined ? {} : { exchange: this.exchange }),
      routingKey: this.routingKey,
      ...(this.queue === undefined ? {} : { queue: this.queue }),
      ...(this.match === undefined ? {} : { match: this.match }),
      ...(this.keyField === undefined ? {} : { keyField: this.keyField }),
      batch: this.batch,
      ...(this.shared ? { shared: true } : {}),
    };
    return { classpath: RabbitMqTrigger.classpath, kwargs };
  }

  /** A shared watcher's row leaves its `match` out: it is the DAG's event filter (on the event's `message`), and the row is the queue's. */
  override serializeAsWatcher(): SerializedWatcher {
    return this.shared ? matchAsEventFilter(this.serialize(), this.match) : this.serialize();
  }

  override describeWait(): string {
    const source = this.exchange === undefined ? `queue ${this.queue}` : `exchange ${this.exchange} (${this.routingKey})`;
    return `${source}${this.match === undefined ? '' : ` matching ${JSON.stringify(this.match)}`}`;
  }

  // No `signal` parameter (a wait needs none), and a wait's generator returned as it is (see RedisStreamTrigger.run).
  run(): AsyncGenerator<TriggerEvent | WatchEvents> {
    return this.watching ? this.#watch(this.signal) : this.#wait();
  }

  /** A wait: the first matching message from the triggerer's one queue bound to the exchange with the routing key. */
  async *#wait(): AsyncGenerator<TriggerEvent> {
    if (this.exchange === undefined) {
      throw new InvalidTriggerArgumentError(
        'RabbitMqTrigger',
        'a wait reads from an exchange (give exchange): taking messages off a shared queue would take them from its other consumers',
      );
    }
    const upstream = this.readUpstream(new RabbitMqExchangeUpstream(this.connection, this.exchange, this.routingKey), matchFilter(null, this.match));
    const first = await upstream.first();
    const meta = first.meta as { exchange: string; routingKey: string; messageId: string | null };
    yield new TriggerEvent({ exchange: meta.exchange, routingKey: meta.routingKey, messageId: meta.messageId, message: first.body } satisfies RabbitMqMessage);
  }

  async *#watch(signal: AbortSignal): AsyncGenerator<WatchEvents> {
    const stopped = () => signal.aborted || this.#stopped;
    const life: SessionLife = {
      stopped,
      warn: (message) => this.log.warn(`rabbitmq: ${message}`),
      pause: (ms) => this.sleep(ms),
      holding: (connection) => {
        this.#connection = connection;
      },
    };
    yield* sessionsOf(connectionFromEnv(this.connection).url, life, (channel, lost) => this.#consume(channel, lost, stopped));
  }

  /** One connection's part of a watcher's life: its queue consumed, batch by batch, each batch acknowledged once committed. */
  async *#consume(channel: AmqpChannel, lost: LostConnection, stopped: () => boolean): AsyncGenerator<WatchEvents> {
    const inbox: AmqpMessage[] = [];
    const wake = () => this.#wake?.();
    lost.onLost = wake;
    const queue = await this.#subscribe(channel);
    await channel.consume(
      queue,
      (message) => {
        if (message !== null) inbox.push(message);
        wake();
      },
      { noAck: false },
    );
    while (!stopped() && lost.reason === null) {
      if (inbox.length === 0) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
        this.#wake = null;
        continue;
      }
      // A burst arrives frame by frame: what else is already here joins the batch.
      await new Promise((resolve) => setImmediate(resolve));
      const taken = inbox.splice(0, this.batch);
      const events = taken.map((message) => eventOf(message)).filter((event) => this.#matches(event.event));
      yield new WatchEvents(
        events.map(({ event, content }) => ({ key: this.#keyOf(event, content), payload: event })),
        { queue, deliveryTag: taken.at(-1)!.fields.deliveryTag },
      );
      // Committed: acknowledged, every message up to the batch's last. Lost with the
      // connection, the broker delivers the batch again, and its keys make no second run.
      if (lost.reason === null) channel.ack(taken.at(-1)!, true);
    }
  }

  override async cleanup(): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    await this.#connection?.close().catch(() => {});
    this.#connection = null;
  }

  override watcherConsumer(): string {
    return `amqp:${this.connection}:queue:${this.#watcherQueue()}`;
  }

  /** The queue a watcher consumes: `queue`, or one named after what selects its messages. */
  #watcherQueue(): string {
    // A shared watcher's queue is named by all that makes its row (its match is no part of it): two
    // rows never consume one queue, or each would take the other's messages.
    const selectors = this.shared ? ['shared', this.keyField, this.batch] : [this.match];
    return this.queue ?? defaultConsumerName(`deferflow.${this.exchange}.${this.routingKey}`, selectors, '.');
  }

  /** The watcher's durable queue, declared (and bound to the exchange when one is given). */
  async #subscribe(channel: AmqpChannel): Promise<string> {
    const queue = this.#watcherQueue();
    await channel.assertQueue(queue, { durable: true });
    if (this.exchange !== undefined) {
      await channel.checkExchange(this.exchange);
      await channel.bindQueue(queue, this.exchange, this.routingKey);
    }
    await channel.prefetch(this.batch);
    return queue;
  }

  #keyOf(event: RabbitMqMessage, content: Buffer): string {
    if (this.keyField !== undefined) {
      const body = event.message;
      const value = body !== null && typeof body === 'object' && !Array.isArray(body) ? body[this.keyField] : undefined;
      if (value !== undefined && value !== null) {
        const key = `${typeof value === 'string' ? value : JSON.stringify(value)}`;
        if (key.length <= 200) return key;
      }
    } else if (event.messageId !== null && event.messageId.length <= 200) {
      return event.messageId;
    }
    return createHash('sha256').update(event.routingKey).update('\0').update(content).digest('hex').slice(0, 40);
  }

  #matches(event: RabbitMqMessage): boolean {
    return this.match === undefined || matches(event.message, this.match);
  }
}

/**
 * One exclusive queue bound to an exchange with a routing key, consumed for every wait on them in a
 * triggerer (see UpstreamHub). A new queue holds no history, so there is none to catch up on:
 * positions count the messages this queue received, and a wait takes those after it joined. A lost
 * connection is connected again (a new queue: what was routed meanwhile is not seen, as for a
 * wait's own queue before).
 */
class RabbitMqExchangeUpstream implements UpstreamSource {
  readonly key: string;
  #received = 0;
  #connection: AmqpConnection | null = null;

  constructor(
    readonly connection: string,
    readonly exchange: string,
    readonly routingKey: string,
  ) {
    this.key = `amqp:${connection}:${exchange}:${routingKey}`;
  }

  compare(a: string, b: string): number {
    return Number(a) - Number(b);
  }

  async head(): Promise<string> {
    return String(this.#received);
  }

  async *read(_from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage[]> {
    const inbox = new PushedMessages();
    context.signal.addEventListener('abort', () => inbox.interrupt(), { once: true });
    const life: SessionLife = {
      stopped: () => context.signal.aborted,
      warn: (message) => context.warn(message),
      pause: (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref()),
      holding: (connection) => {
        this.#connection = connection;
      },
    };
    yield* sessionsOf(connectionFromEnv(this.connection).url, life, (channel, lost) => this.#consume(channel, lost, inbox, context.signal));
  }

  /** One connection's part of the reader's life: a new exclusive queue bound to the exchange, its messages pushed to `inbox`. */
  async *#consume(channel: AmqpChannel, lost: LostConnection, inbox: PushedMessages, signal: AbortSignal): AsyncGenerator<readonly UpstreamMessage[]> {
    lost.onLost = () => inbox.interrupt();
    await channel.checkExchange(this.exchange);
    const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
    await channel.bindQueue(queue, this.exchange, this.routingKey);
    await channel.consume(
      queue,
      (message) => {
        if (message === null) return;
        const { event } = eventOf(message);
        inbox.push({
          position: String(++this.#received),
          body: event.message,
          meta: { exchange: event.exchange, routingKey: event.routingKey, messageId: event.messageId },
        });
      },
      { noAck: true },
    );
    while (!signal.aborted && lost.reason === null) {
      const batch = await inbox.take();
      if (batch.length > 0) yield batch;
    }
  }

  async range(): Promise<readonly UpstreamMessage[]> {
    return [];
  }

  async close(): Promise<void> {
    await this.#connection?.close().catch(() => {});
    this.#connection = null;
  }
}

/** How a connection's life ends and is told of: what a watcher and a shared exchange reader each give sessionsOf. */
interface SessionLife {
  /** Whether to stop: no connecting again. */
  stopped(): boolean;
  /** Where a refused or lost connection is said. */
  warn(message: string): void;
  /** The pause before connecting again. */
  pause(ms: number): Promise<unknown>;
  /** Told of the open connection (null once closed), for a stop to close it. */
  holding(connection: AmqpConnection | null): void;
}

/** A lost connection's reason once the connection closes, and whom to wake then. */
interface LostConnection {
  reason: string | null;
  onLost: () => void;
}

/**
 * What `session` yields over RabbitMQ connections to `url`, one after another until `life`
 * stops: connects (a broker that refuses is tried again), gives `session` a channel and its
 * connection's `lost`, and, when the connection is lost (or `session` fails for want of one),
 * connects again after a pause. Any other failure is `session`'s own and ends it.
 */
async function* sessionsOf<T>(url: string, life: SessionLife, session: (channel: AmqpChannel, lost: LostConnection) => AsyncGenerator<T>): AsyncGenerator<T> {
  const client = amqplib();
  while (!life.stopped()) {
    const lost: LostConnection = { reason: null, onLost: () => {} };
    let connection: AmqpConnection;
    try {
      connection = await client.connect(url);
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      life.warn(`cannot connect (${(error as Error).message}); trying again`);
      await life.pause(RECONNECT_PAUSE_MS * 2);
      continue;
    }
    life.holding(connection);
    connection.on('error', () => {});
    connection.on('close', (error?: Error) => {
      lost.reason = error?.message ?? 'connection closed';
      lost.onLost();
    });
    try {
      const channel = await connection.createChannel();
      channel.on('error', () => {});
      yield* session(channel, lost);
    } catch (error) {
      if (life.stopped()) return;
      if (lost.reason === null && !isConnectionError(error)) throw error;
    } finally {
      life.holding(null);
      void connection.close().catch(() => {});
    }
    if (life.stopped()) return;
    life.warn(`connection lost (${lost.reason ?? 'a call failed for want of it'}); connecting again`);
    await life.pause(RECONNECT_PAUSE_MS);
  }
}

function eventOf(message: AmqpMessage): { event: RabbitMqMessage; content: Buffer } {
  const text = message.content.toString();
  let body: JsonValue;
  try {
    body = JSON.parse(text) as JsonValue;
  } catch {
    body = text;
  }
  const messageId = typeof message.properties.messageId === 'string' ? message.properties.messageId : null;
  return { event: { exchange: message.fields.exchange, routingKey: message.fields.routingKey, messageId, message: body }, content: message.content };
}

/** Whether an operation failed for want of a connection (refused, reset, closed), not for what it asked. */
function isConnectionError(error: unknown): boolean {
  const message = String((error as Error)?.message ?? '');
  const code = String((error as NodeJS.ErrnoException)?.code ?? '');
  return /ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH/.test(code) || /closed|ECONNRESET|ECONNREFUSED|socket|Connection/i.test(message);
}
