import { createHash, randomBytes } from 'node:crypto';
import type * as MqttModule from 'mqtt';
import { BaseTrigger, type SerializedTrigger, type SerializedWatcher } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent, WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import { PushedMessages, type UpstreamContext, type UpstreamMessage, type UpstreamSource } from '../src/authoring/triggers/upstream-hub.ts';
import { connectionFromEnv } from '../src/authoring/connections/connections.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { optionalPackage } from '../src/vocabulary/lazy-package.ts';
import { canonicalJson, type JsonObject, type JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkConnectionName, checkKwargFields, sharedFlag } from './kwarg-checks.ts';
import { matchAsEventFilter, matchFilter } from './shared-stream.ts';
import { describeValue } from './date-time-trigger.ts';

// An optional peer dependency: only users of this trigger install it (see docs/events.md).
const mqtt = optionalPackage<typeof MqttModule>('mqtt', 'MqttTrigger');
type MqttClient = MqttModule.MqttClient;
type PublishPacket = Parameters<MqttClient['handleMessage']>[0];

export interface MqttTriggerKwargs {
  /** A named connection (DEFERFLOW_CONN_<NAME>) whose URL is mqtt:// or mqtts:// (user and password in it). Its URL is never stored. */
  readonly connection: string;
  /** The topic filter subscribed to, at QoS 1 (wildcards `+` and `#` allowed). */
  readonly topic: string;
  /** Only a message whose body matches fires (a subset match, as SignalTrigger's `match`); absent: any. */
  readonly match?: JsonValue;
  /**
   * A watcher's event key: this field of the (JSON) body, an id its publisher gives each message.
   * @default a hash of the topic and body: identical bodies on one topic are one event
   */
  readonly keyField?: string;
  /** A watcher's persistent session (its client id is made from this, the topic and `match`): messages published while no triggerer is connected wait in it. @default 'deferflow' */
  readonly session?: string;
  /**
   * A watcher shares one session with the shared watchers of the other DAGs on the same topic (and
   * connection, keyField and session), whatever their `match`: one row, one session, each DAG's
   * `match` applied to the events as its runs are written, and each message acknowledged once the
   * runs of every DAG are committed. Without it, a watcher with its own `match` has a session of
   * its own. A wait ignores it (waits on a topic always share). @default false
   */
  readonly shared?: boolean;
}

/** What a message event carries: its topic and body (JSON if it parses, else text). */
export interface MqttMessage extends JsonObject {
  readonly topic: string;
  readonly message: JsonValue;
}

/** A message received and not yet acknowledged: `ack` sends the PUBACK, after which the client reads the next. */
interface Delivery {
  readonly packet: PublishPacket;
  readonly ack: () => void;
}

/**
 * Messages of an MQTT topic (uses `mqtt`, an optional peer dependency), subscribed at QoS 1.
 *
 * As a wait (a task defers on it): fires with the first message whose body matches `match`,
 * published after the wait joined the triggerer's one clean-session subscription to the topic
 * (shared by every wait on it): `{ topic, message }` (MQTT keeps no history: a message published
 * before then is not seen; retained messages are skipped).
 * As a watcher (a DAG scheduled on it): a persistent session (`session`), each message handed
 * over and acknowledged (PUBACK) only once its run is committed; the broker delivers again what
 * was not acknowledged, and the message's key (`keyField`, or a hash of topic and body) keeps it
 * from making a second run. MQTT delivers the next message of a session only after the previous
 * one is acknowledged: a watcher commits one message at a time.
 */
export class MqttTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.MqttTrigger';
  readonly connection: string;
  readonly topic: string;
  readonly match: JsonValue | undefined;
  readonly keyField: string | undefined;
  readonly session: string;
  readonly shared: boolean;
  #client: MqttClient | null = null;
  #wake: (() => void) | null = null;

  constructor(kwargs: MqttTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('MqttTrigger', why);
    checkKwargFields(kwargs, '{ connection, topic, … }', ['connection', 'topic', 'match', 'keyField', 'session', 'shared'], invalid);
    const { connection, topic, match, keyField, session = 'deferflow' } = kwargs;
    checkConnectionName(connection, invalid);
    if (typeof topic !== 'string' || topic === '' || !validTopicFilter(topic))
      throw invalid(`topic ${describeValue(topic)} is not a topic filter ("+" and "#" stand for whole levels, "#" last)`);
    if (keyField !== undefined && (typeof keyField !== 'string' || keyField === '')) throw invalid(`keyField ${describeValue(keyField)} is not a field name`);
    if (typeof session !== 'string' || !/^[A-Za-z0-9_-]{1,40}$/.test(session))
      throw invalid(`session ${describeValue(session)} is not a session name (letters, digits, "_", "-"; at most 40)`);
    this.connection = connection;
    this.topic = topic;
    this.match = match;
    this.keyField = keyField;
    this.session = session;
    this.shared = sharedFlag(kwargs.shared, invalid);
  }

  override serialize(): SerializedTrigger {
    const kwargs: JsonObject = {
      connection: this.connection,
      topic: this.topic,
      ...(this.match === undefined ? {} : { match: this.match }),
      ...(this.keyField === undefined ? {} : { keyField: this.keyField }),
      session: this.session,
      ...(this.shared ? { shared: true } : {}),
    };
    return { classpath: MqttTrigger.classpath, kwargs };
  }

  /** A shared watcher's row leaves its `match` out: it is the DAG's event filter (on the event's `message`), and the row is the session's. */
  override serializeAsWatcher(): SerializedWatcher {
    return this.shared ? matchAsEventFilter(this.serialize(), this.match) : this.serialize();
  }

  override describeWait(): string {
    return `topic ${this.topic}${this.match === undefined ? '' : ` matching ${JSON.stringify(this.match)}`}`;
  }

  // No `signal` parameter (a wait needs none), and a wait's generator returned as it is (see RedisStreamTrigger.run).
  run(): AsyncGenerator<TriggerEvent | WatchEvents> {
    return this.watching ? this.#watch(this.signal) : this.#wait();
  }

  /** A wait: the first matching message from the triggerer's shared subscription to the topic. */
  async *#wait(): AsyncGenerator<TriggerEvent> {
    const first = await this.readUpstream(new MqttTopicUpstream(this.connection, this.topic), matchFilter(null, this.match)).first();
    yield new TriggerEvent({ topic: String(first.meta?.topic ?? this.topic), message: first.body } satisfies MqttMessage);
  }

  async *#watch(signal: AbortSignal): AsyncGenerator<WatchEvents> {
    const inbox: Delivery[] = [];
    const client = mqtt().connect(connectionFromEnv(this.connection).url, {
      // A watcher's session outlives its connection (and its triggerer): the broker keeps what it has not acknowledged.
      clean: !this.watching,
      clientId: this.watching ? this.#sessionClientId() : `deferflow_${randomBytes(8).toString('hex')}`,
      reconnectPeriod: 500,
      connectTimeout: 10_000,
    });
    this.#client = client;
    // Connection errors are waited out: the client reconnects (and subscribes again) by itself.
    client.on('error', () => {});
    client.handleMessage = (packet, done) => {
      inbox.push({ packet, ack: () => done() });
      this.#wake?.();
    };
    // Not awaited: a session taken over holds messages the broker sends before the SUBACK, and
    // the client reads no packet past one until it is acknowledged, which the loop below does
    // (awaiting the SUBACK first waited for ever, every message queued while no triggerer ran it).
    let refused: Error | null = null;
    client.subscribe(this.topic, { qos: 1 }, (error) => {
      if (error === null || error === undefined) return;
      refused = error;
      this.#wake?.();
    });
    while (!signal.aborted && this.#client !== null) {
      if (refused !== null) throw refused;
      const delivery = inbox.shift();
      if (delivery === undefined) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
        this.#wake = null;
        continue;
      }
      // A retained message is the topic's last one, from before this subscription: no event.
      if (delivery.packet.retain) {
        delivery.ack();
        continue;
      }
      const event: MqttMessage = { topic: delivery.packet.topic, message: bodyOf(delivery.packet.payload) };
      if (!this.#matches(event)) {
        delivery.ack();
        continue;
      }
      const key = this.#keyOf(event, delivery.packet.payload);
      yield new WatchEvents([{ key, payload: event }], { topic: event.topic, key });
      // Committed: acknowledged (PUBACK), and the broker sends the next one.
      delivery.ack();
    }
  }

  override async cleanup(): Promise<void> {
    const client = this.#client;
    this.#client = null;
    this.#wake?.();
    // Forced: nothing is waiting to be sent that matters (an acknowledgement not sent is a message delivered again).
    await client?.endAsync(true);
  }

  override watcherConsumer(): string {
    return `mqtt:${this.connection}:session:${this.#sessionClientId()}`;
  }

  /** A client id every triggerer running this watcher shares, so that each resumes the same session. */
  #sessionClientId(): string {
    // The filter is part of it: two watchers of one topic with different filters are two sessions
    // (one client id is one connection: the broker would drop either for the other).
    // A shared watcher's session is named by all that makes its row (its match is no part of it).
    const filter = this.shared ? `\0shared\0${this.keyField ?? ''}` : this.match === undefined ? '' : `\0${canonicalJson(this.match)}`;
    return `deferflow_${this.session}_${createHash('sha256').update(this.topic).update(filter).digest('hex').slice(0, 16)}`;
  }

  #keyOf(event: MqttMessage, payload: Buffer | string): string {
    if (this.keyField !== undefined) {
      const value = event.message !== null && typeof event.message === 'object' && !Array.isArray(event.message) ? event.message[this.keyField] : undefined;
      if (value !== undefined && value !== null) {
        const key = `${event.topic}:${typeof value === 'string' ? value : JSON.stringify(value)}`;
        if (key.length <= 200) return key;
      }
    }
    return `${event.topic.slice(0, 120)}:${createHash('sha256').update(event.topic).update('\0').update(payload).digest('hex').slice(0, 32)}`;
  }

  #matches(event: MqttMessage): boolean {
    return this.match === undefined || matches(event.message, this.match);
  }
}

/**
 * One clean-session subscription to a topic filter for every wait on it in a triggerer (see
 * UpstreamHub). MQTT keeps no history, so there is none to catch up on: positions count the
 * messages this subscription received, and a wait takes those after it joined. A message is
 * acknowledged on receipt: a clean session loses what it has not handed over when its connection
 * goes, acknowledged or not.
 */
class MqttTopicUpstream implements UpstreamSource {
  readonly key: string;
  #received = 0;
  #client: MqttClient | null = null;

  constructor(
    readonly connection: string,
    readonly topic: string,
  ) {
    this.key = `mqtt:${connection}:${topic}`;
  }

  compare(a: string, b: string): number {
    return Number(a) - Number(b);
  }

  async head(): Promise<string> {
    return String(this.#received);
  }

  async *read(_from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage[]> {
    const inbox = new PushedMessages();
    const client = mqtt().connect(connectionFromEnv(this.connection).url, {
      clean: true,
      clientId: `deferflow_${randomBytes(8).toString('hex')}`,
      reconnectPeriod: 500,
      connectTimeout: 10_000,
    });
    this.#client = client;
    // Connection errors are waited out: the client reconnects (and subscribes again) by itself.
    client.on('error', () => {});
    client.on('offline', () => context.warn('connection lost; subscribing again once reconnected'));
    client.handleMessage = (packet, done) => {
      done();
      // A retained message is the topic's last one, from before this subscription: no event.
      if (packet.retain) return;
      inbox.push({ position: String(++this.#received), body: bodyOf(packet.payload), meta: { topic: packet.topic } });
    };
    context.signal.addEventListener('abort', () => inbox.interrupt(), { once: true });
    await client.subscribeAsync(this.topic, { qos: 1 });
    while (!context.signal.aborted) {
      const batch = await inbox.take();
      if (batch.length > 0) yield batch;
    }
  }

  async range(): Promise<readonly UpstreamMessage[]> {
    return [];
  }

  async close(): Promise<void> {
    const client = this.#client;
    this.#client = null;
    await client?.endAsync(true);
  }
}

function bodyOf(payload: Buffer | string): JsonValue {
  const text = payload.toString();
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return text;
  }
}

/** MQTT's rule for a topic filter: `+` alone in a level, `#` alone in the last level. */
function validTopicFilter(topic: string): boolean {
  const levels = topic.split('/');
  return levels.every(
    (level, index) => (level.includes('+') ? level === '+' : true) && (level.includes('#') ? level === '#' && index === levels.length - 1 : true),
  );
}
