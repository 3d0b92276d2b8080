import os from 'node:os';
import type * as RedisModule from '@redis/client';
import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent, WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import type { UpstreamContext, UpstreamMessage, UpstreamSource } from '../src/authoring/triggers/upstream-hub.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import { connectionFromEnv } from '../src/authoring/connections/connections.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { optionalPackage } from '../src/vocabulary/lazy-package.ts';
import type { JsonObject, JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkBatch, checkConnectionName, checkKwargFields, sharedFlag } from './kwarg-checks.ts';
import { inBatches, matchFilter, watcherCapacity } from './shared-stream.ts';
import { defaultConsumerName } from './consumer-name.ts';
import { describeValue } from './date-time-trigger.ts';

// An optional peer dependency: only users of this trigger install it (see docs/events.md).
const redis = optionalPackage<typeof RedisModule>('@redis/client', 'RedisStreamTrigger');
/**
 * A client of the connection's URL, named for `CLIENT LIST` (`deferflow-<role>-<pid>`); connection
 * errors are the reads' to wait out (see acrossLostConnections), since unheard they would end the process.
 */
function redisClient(url: string, role: 'watcher' | 'upstream') {
  const client = redis().createClient({ url, name: `deferflow-${role}-${process.pid}` });
  client.on('error', () => {});
  return client;
}
type RedisClient = ReturnType<typeof redisClient>;

export interface RedisStreamTriggerKwargs {
  /** A named connection (DEFERFLOW_CONN_<NAME>) whose URL is redis:// or rediss://. Its URL is never stored. */
  readonly connection: string;
  /** The stream's key. */
  readonly stream: string;
  /** Only a message whose body matches fires (a subset match, as SignalTrigger's `match`); absent: any. */
  readonly match?: JsonValue;
  /** The field holding the message body as JSON (e.g. `data`); absent: the body is the message's fields as an object. */
  readonly jsonField?: string;
  /**
   * A wait reads the messages after this stream id. @default the moment the trigger is made: after
   * every id of the millisecond before (`<ms - 1>-18446744073709551615`), so that no message added
   * after the task deferred is missed, even in the same millisecond, whichever triggerer runs it.
   */
  readonly after?: string;
  /**
   * A watcher's consumer group, made (MKSTREAM) if missing. @default `deferflow`, or with `match`
   * `deferflow-<hash of match and jsonField>`: watchers with different filters each see every message
   */
  readonly group?: string;
  /** Where a watcher's new consumer group starts: `$`, messages added from then on; `0`, the whole stream. @default '$' */
  readonly start?: '$' | '0';
  /** Messages read at once, and handed over in one batch by a watcher. @default 100 */
  readonly batch?: number;
  /** Longest one read blocks waiting for messages, in seconds. @default 5 */
  readonly block?: number;
  /**
   * A watcher reads through the triggerer's one shared reader of the stream (with the waits and
   * other shared watchers on it), from its cursor, instead of through a consumer group: its position
   * is the cursor deferflow commits with its runs, so nothing is acknowledged in Redis. @default false
   */
  readonly shared?: boolean;
}

/** What a message event carries: its stream, its id and its body. */
export interface RedisStreamMessage extends JsonObject {
  readonly stream: string;
  readonly id: string;
  readonly message: JsonValue;
}

/** The largest sequence number of a stream id (64 bits): `<ms>-<LAST_SEQUENCE>` comes after every id of millisecond `ms`. */
const LAST_SEQUENCE = '18446744073709551615';

/** Pause before reading again after a lost connection (the client reconnects meanwhile). */
const RECONNECT_PAUSE_MS = 500;

/**
 * Messages of a Redis stream (uses `@redis/client`, an optional peer dependency).
 *
 * As a wait (a task defers on it): takes the messages after `after` (by default the moment the
 * trigger was made) from the triggerer's one shared reader of the stream, and fires with the first
 * whose body matches `match`: `{ stream, id, message }`. 5,000 tasks waiting on one stream cost
 * one reader per triggerer, not 5,000 connections. As a watcher (a DAG scheduled on it): reads through consumer group
 * `group`, hands over each batch of matching messages (key `<stream>:<id>`, payload
 * `{ stream, id, message }`) and acknowledges the batch (XACK) only once its runs are committed;
 * taking over from a triggerer that died, it first claims the group's pending messages (XAUTOCLAIM),
 * which their keys keep from making second runs. A connection lost (the server restarted) is
 * waited out: reads resume once the client has reconnected, and nothing unacknowledged is lost.
 */
export class RedisStreamTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.RedisStreamTrigger';
  readonly connection: string;
  readonly stream: string;
  readonly match: JsonValue | undefined;
  readonly jsonField: string | undefined;
  readonly after: string;
  readonly group: string;
  readonly start: '$' | '0';
  readonly batch: number;
  readonly block: number;
  readonly shared: boolean;
  #client: RedisClient | null = null;
  /** Set when a read waited out a lost connection: a watcher then reads its own pending messages again. */
  #reconnected = false;

  constructor(kwargs: RedisStreamTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('RedisStreamTrigger', why);
    checkKwargFields(
      kwargs,
      '{ connection, stream, … }',
      ['connection', 'stream', 'match', 'jsonField', 'after', 'group', 'start', 'batch', 'block', 'shared'],
      invalid,
    );
    const {
      connection,
      stream,
      match,
      jsonField,
      after = `${Date.now() - 1}-${LAST_SEQUENCE}`,
      group = defaultConsumerName('deferflow', kwargs.match === undefined ? [] : [kwargs.match, kwargs.jsonField]),
      start = '$',
      batch = 100,
      block = 5,
    } = kwargs;
    checkConnectionName(connection, invalid);
    if (typeof stream !== 'string' || stream === '') throw invalid(`stream ${describeValue(stream)} is not a stream key`);
    if (jsonField !== undefined && (typeof jsonField !== 'string' || jsonField === ''))
      throw invalid(`jsonField ${describeValue(jsonField)} is not a field name`);
    if (typeof after !== 'string' || !/^(\d+(-\d+)?|\$)$/.test(after)) throw invalid(`after ${describeValue(after)} is not a stream id (<ms>-<seq>)`);
    if (typeof group !== 'string' || group === '') throw invalid(`group ${describeValue(group)} is not a consumer group name`);
    if (start !== '$' && start !== '0') throw invalid(`start ${describeValue(start)} must be "$" (new messages) or "0" (the whole stream)`);
    checkBatch(batch, invalid);
    if (typeof block !== 'number' || !(block > 0) || block > 60) throw invalid(`block ${describeValue(block)} is not a number of seconds above 0, at most 60`);
    this.connection = connection;
    this.stream = stream;
    this.match = match;
    this.jsonField = jsonField;
    this.after = after;
    this.group = group;
    this.start = start;
    this.batch = batch;
    this.block = block;
    this.shared = sharedFlag(kwargs.shared, invalid);
  }

  override serialize(): SerializedTrigger {
    return { classpath: RedisStreamTrigger.classpath, kwargs: this.#kwargs(true) };
  }

  /** A watcher reads through its consumer group: the wait's starting id is no part of it (and would make a new row each time the DAG is processed). */
  override serializeAsWatcher(): SerializedTrigger {
    return { classpath: RedisStreamTrigger.classpath, kwargs: this.#kwargs(false) };
  }

  /** Its consumer group; a shared watcher reads through none (its cursor is its own). */
  override watcherConsumer(): string | undefined {
    return this.shared ? undefined : `redis:${this.connection}:${this.stream}:group:${this.group}`;
  }

  #kwargs(withAfter: boolean): JsonObject {
    return {
      connection: this.connection,
      stream: this.stream,
      ...(this.match === undefined ? {} : { match: this.match }),
      ...(this.jsonField === undefined ? {} : { jsonField: this.jsonField }),
      ...(withAfter ? { after: this.after } : {}),
      group: this.group,
      start: this.start,
      batch: this.batch,
      block: this.block,
      ...(this.shared ? { shared: true } : {}),
    };
  }

  override describeWait(): string {
    return `stream ${this.stream}${this.match === undefined ? '' : ` matching ${JSON.stringify(this.match)}`}`;
  }

  // No `signal` parameter: a wait needs none (the shared reader stops it), so the triggerer makes
  // none per wait; and the wait's generator is returned as it is, not delegated to (one generator a
  // wait, not two: thousands of waits share a stream).
  run(): AsyncGenerator<TriggerEvent | WatchEvents> {
    if (!this.watching) return this.#wait();
    return this.shared ? this.#watchShared() : this.#watchOwnConnection();
  }

  /**
   * A shared watcher: the matching messages after its cursor from the triggerer's shared reader,
   * handed over `batch` at a time, each batch's last id its cursor. With no cursor yet it starts at
   * `start` and writes that position first, so that a restart before its first event misses nothing.
   */
  async *#watchShared(): AsyncGenerator<WatchEvents> {
    let since = (this.cursor as { id?: string } | null)?.id;
    if (since === undefined) {
      since = this.start === '0' ? '0-0' : `${Date.now() - 1}-${LAST_SEQUENCE}`;
      yield new WatchEvents([], { stream: this.stream, id: since });
    }
    const upstream = this.readUpstream(
      new RedisStreamUpstream(this.connection, this.stream, this.jsonField, this.batch, this.block),
      matchFilter(since, this.match, watcherCapacity(this.batch)),
    );
    yield* inBatches(
      upstream,
      this.batch,
      (message) => ({
        key: `${this.stream}:${message.position}`,
        payload: { stream: this.stream, id: message.position, message: message.body } satisfies RedisStreamMessage,
      }),
      (last) => ({ stream: this.stream, id: last.position }),
    );
  }

  async *#watchOwnConnection(): AsyncGenerator<WatchEvents> {
    const client = redisClient(connectionFromEnv(this.connection).url, 'watcher');
    this.#client = client;
    await client.connect();
    yield* this.#watch(client, this.signal);
  }

  override async cleanup(): Promise<void> {
    // Ends a read blocked on the server at once, rather than at its `block` timeout.
    this.#client?.destroy();
    this.#client = null;
  }

  /** A wait: the first matching message after `after`, from the shared reader of the stream. */
  async *#wait(): AsyncGenerator<TriggerEvent> {
    const upstream = this.readUpstream(
      new RedisStreamUpstream(this.connection, this.stream, this.jsonField, this.batch, this.block),
      matchFilter(this.after === '$' ? null : this.after, this.match),
    );
    const first = await upstream.first();
    yield new TriggerEvent({ stream: this.stream, id: first.position, message: first.body } satisfies RedisStreamMessage);
  }

  async *#watch(client: RedisClient, signal: AbortSignal): AsyncGenerator<WatchEvents> {
    try {
      await client.xGroupCreate(this.stream, this.group, this.start, { MKSTREAM: true });
    } catch (error) {
      if (!String((error as Error).message).includes('BUSYGROUP')) throw error;
    }
    const consumer = `deferflow-${os.hostname()}-${process.pid}`;
    while (!signal.aborted) {
      // First what the group holds unacknowledged: a dead triggerer's last batch, or this one's. Again
      // after every lost connection: a read whose reply the connection lost left its messages
      // delivered to this consumer, which `>` never returns again.
      this.#reconnected = false;
      for (let from = '0-0'; !signal.aborted && !this.#reconnected; ) {
        const claimed = await this.#read(signal, () => client.xAutoClaim(this.stream, this.group, consumer, 0, from, { COUNT: this.batch }));
        const entries = (claimed?.messages ?? []).filter((entry): entry is RedisEntry => entry !== null);
        if (entries.length > 0) yield* this.#handOver(client, signal, entries);
        if (!claimed || claimed.nextId === '0-0') break;
        from = claimed.nextId;
      }
      while (!signal.aborted && !this.#reconnected) {
        const reply = await this.#read(signal, () =>
          client.xReadGroup(this.group, consumer, [{ key: this.stream, id: '>' }], { COUNT: this.batch, BLOCK: this.block * 1000 }),
        );
        const entries = messagesOf(reply);
        if (entries.length > 0) yield* this.#handOver(client, signal, entries);
      }
    }
  }

  /** One batch: its matching messages handed over (runs committed when the yield returns), then all of it acknowledged. */
  async *#handOver(client: RedisClient, signal: AbortSignal, entries: readonly RedisEntry[]): AsyncGenerator<WatchEvents> {
    const events = entries.map((entry) => this.#event(entry)).filter((event) => this.#matches(event));
    yield new WatchEvents(
      events.map((event) => ({ key: `${this.stream}:${event.id}`, payload: event })),
      { stream: this.stream, id: entries.at(-1)!.id },
    );
    // An acknowledgement lost with the connection is sent again: XACK of an id already acknowledged does nothing.
    const ids = entries.map((entry) => entry.id);
    await this.#read(signal, () => client.xAck(this.stream, this.group, ids));
  }

  #event(entry: RedisEntry): RedisStreamMessage {
    return { stream: this.stream, id: entry.id, message: bodyOf(entry, this.jsonField) };
  }

  #matches(event: RedisStreamMessage): boolean {
    return this.match === undefined || matches(event.message, this.match);
  }

  /** A read, waited out across a lost connection (the client reconnects by itself); null when cancelled meanwhile. */
  #read<T>(signal: AbortSignal, read: () => Promise<T>): Promise<T | null> {
    return acrossLostConnections(
      read,
      () => signal.aborted || this.#client === null,
      (error) => {
        this.log.warn({ stream: this.stream, error: (error as Error).message }, `redis stream ${this.stream}: connection lost; reading again once reconnected`);
        this.#reconnected = true;
        return this.sleep(RECONNECT_PAUSE_MS);
      },
    );
  }
}

/**
 * One stream read for every wait on it in a triggerer (see UpstreamHub): one connection blocked in
 * XREAD, and one for the history a late wait missed (XRANGE) and the stream's head.
 */
class RedisStreamUpstream implements UpstreamSource {
  readonly key: string;
  #reader: RedisClient | null = null;
  #commands: Promise<RedisClient> | null = null;

  constructor(
    readonly connection: string,
    readonly stream: string,
    readonly jsonField: string | undefined,
    readonly batch: number,
    readonly block: number,
  ) {
    // What is read and how its bodies are parsed; batch and block only pace the one read.
    this.key = `redis:${connection}:${stream}${jsonField === undefined ? '' : `#${jsonField}`}`;
  }

  compare(a: string, b: string): number {
    return compareStreamIds(a, b);
  }

  async head(context: UpstreamContext): Promise<string> {
    const client = await this.#commandClient();
    const last = await this.#untilDone(context, () => client.xRevRange(this.stream, '+', '-', { COUNT: 1 }));
    return last?.[0]?.id ?? '0-0';
  }

  async *read(from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage[]> {
    const client = redisClient(connectionFromEnv(this.connection).url, 'upstream');
    this.#reader = client;
    // Ends a read blocked on the server at once, rather than at its `block` timeout.
    context.signal.addEventListener('abort', () => destroyClient(client), { once: true });
    await client.connect();
    let after = from;
    while (!context.signal.aborted) {
      const reply = await this.#untilDone(context, () => client.xRead([{ key: this.stream, id: after }], { COUNT: this.batch, BLOCK: this.block * 1000 }));
      const entries = messagesOf(reply);
      if (entries.length === 0) continue;
      after = entries.at(-1)!.id;
      yield entries.map((entry) => ({ position: entry.id, body: bodyOf(entry, this.jsonField) }));
    }
  }

  async range(after: string, upTo: string, context: UpstreamContext): Promise<readonly UpstreamMessage[]> {
    const client = await this.#commandClient();
    const messages: UpstreamMessage[] = [];
    const page = 1000;
    for (let from = `(${after}`; ; ) {
      const entries = (await this.#untilDone(context, () => client.xRange(this.stream, from, upTo, { COUNT: page }))) ?? [];
      for (const entry of entries) messages.push({ position: entry.id, body: bodyOf(entry, this.jsonField) });
      if (entries.length < page) return messages;
      from = `(${entries.at(-1)!.id}`;
    }
  }

  async close(): Promise<void> {
    if (this.#reader) destroyClient(this.#reader);
    this.#reader = null;
    const commands = await this.#commands?.catch(() => null);
    this.#commands = null;
    if (commands) destroyClient(commands);
  }

  #commandClient(): Promise<RedisClient> {
    this.#commands ??= (async () => {
      const client = redisClient(connectionFromEnv(this.connection).url, 'upstream');
      await client.connect();
      return client;
    })();
    return this.#commands;
  }

  #untilDone<T>(context: UpstreamContext, read: () => Promise<T>): Promise<T | null> {
    return acrossLostConnections(
      read,
      () => context.signal.aborted,
      (error) => {
        context.warn(`connection lost (${(error as Error).message}); reading again once reconnected`);
        return new Promise((resolve) => setTimeout(resolve, RECONNECT_PAUSE_MS).unref());
      },
    );
  }
}

/** A call, made again after each lost connection (the client reconnects by itself) once `pause` resolves; null when stopped meanwhile. */
async function acrossLostConnections<T>(call: () => Promise<T>, stopped: () => boolean, pause: (error: unknown) => Promise<void>): Promise<T | null> {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (stopped()) return null;
      // A server error on the command itself (a wrong type, a missing group) is the trigger's failure.
      if (!isConnectionError(error)) throw error;
      await pause(error);
    }
  }
}

/** Closes a client at once, whatever its state (destroying a closed client throws). */
function destroyClient(client: RedisClient): void {
  try {
    client.destroy();
  } catch {
    // Closed already.
  }
}

/** An entry's body: its fields as an object, or with `jsonField` that field read as JSON (its text when not JSON). */
function bodyOf(entry: RedisEntry, jsonField: string | undefined): JsonValue {
  const fields = entry.message;
  if (jsonField === undefined) return { ...fields };
  const text = fields[jsonField];
  if (text === undefined) return null;
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return text;
  }
}

/** Orders two stream ids (`<ms>-<seq>`, the sequence 0 when absent); exact up to sequences of 2^53 in one millisecond. */
export function compareStreamIds(a: string, b: string): number {
  const [aMs = 0, aSeq = 0] = a.split('-').map(Number);
  const [bMs = 0, bSeq = 0] = b.split('-').map(Number);
  return aMs - bMs || aSeq - bSeq;
}

interface RedisEntry {
  readonly id: string;
  readonly message: Record<string, string>;
}

function messagesOf(reply: unknown): RedisEntry[] {
  if (!Array.isArray(reply)) return [];
  return reply.flatMap((stream: { messages?: (RedisEntry | null)[] }) => (stream?.messages ?? []).filter((entry): entry is RedisEntry => entry !== null));
}

/** Whether a command failed for want of a connection (closed, reset, refused), not for what it asked. */
function isConnectionError(error: unknown): boolean {
  const name = (error as Error)?.name ?? '';
  const message = String((error as Error)?.message ?? '');
  return (
    /SocketClosedUnexpectedly|ConnectionTimeout|ClientClosed|ClientOffline|Reconnect/i.test(name) ||
    /ECONNRESET|ECONNREFUSED|EPIPE|closed|offline|socket/i.test(message)
  );
}
