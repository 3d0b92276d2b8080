// The shared upstream hub on an in-memory stream: one reader for every subscriber of a key, each
// given only its own messages after its own position, a late joiner's history first, a slow
// subscriber failing alone, a failed reader failing its subscribers, and a reader closed once
// nobody reads. (RedisStreamTrigger's waits use it against a real Redis: redis-stream-trigger.test.ts.)
import { describe, expect, it } from 'vitest';
import { UpstreamHub, probeOf, type UpstreamContext, type UpstreamMessage, type UpstreamSource } from '../../src/authoring/triggers/upstream-hub.ts';
import type { JsonValue } from '../../src/vocabulary/serialization/json.ts';
import { waitFor } from '../support/fixtures.ts';

/** A stream in memory: positions are 1, 2, 3 … as text; add() appends and wakes the reads. */
class MemoryStream implements UpstreamSource {
  readonly messages: UpstreamMessage[] = [];
  reads: string[] = [];
  ranges: [string, string][] = [];
  closed = 0;
  failWith: Error | null = null;
  #wake: (() => void) | null = null;

  constructor(readonly key = 'memory:orders') {}

  add(...bodies: JsonValue[]): void {
    for (const body of bodies) this.messages.push({ position: String(this.messages.length + 1), body });
    this.#wake?.();
  }

  fail(error: Error): void {
    this.failWith = error;
    this.#wake?.();
  }

  compare(a: string, b: string): number {
    return Number(a) - Number(b);
  }

  async head(): Promise<string> {
    return String(this.messages.length);
  }

  async *read(from: string, context: UpstreamContext): AsyncIterable<readonly UpstreamMessage[]> {
    this.reads.push(from);
    let next = Number(from);
    while (!context.signal.aborted) {
      if (this.failWith) throw this.failWith;
      if (next < this.messages.length) {
        const batch = this.messages.slice(next);
        next = this.messages.length;
        yield batch;
        continue;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        context.signal.addEventListener('abort', () => resolve(), { once: true });
      });
    }
  }

  async range(after: string, upTo: string): Promise<readonly UpstreamMessage[]> {
    this.ranges.push([after, upTo]);
    return this.messages.slice(Number(after), Number(upTo));
  }

  async close(): Promise<void> {
    this.closed++;
  }
}

const orderFilter = (order: number, since: string | null = null) => ({
  since,
  accept: (message: UpstreamMessage) => (message.body as { order?: number }).order === order,
  probe: probeOf({ order }),
});

describe('UpstreamHub', () => {
  it('reads a key once for all its subscribers, from the earliest position, each getting only its own messages after its own', async () => {
    const hub = new UpstreamHub();
    const stream = new MemoryStream();
    stream.add({ order: 1, n: 'a' }, { order: 2, n: 'b' }, { order: 1, n: 'c' });
    const one = hub.subscribe(stream, orderFilter(1, '1'));
    const two = hub.subscribe(stream, orderFilter(2, '0'));
    const any = hub.subscribe(stream, { since: '2', accept: () => true });
    expect((await one.next()).map((m) => m.body)).toEqual([{ order: 1, n: 'c' }]);
    expect((await two.next()).map((m) => m.body)).toEqual([{ order: 2, n: 'b' }]);
    expect((await any.next()).map((m) => m.position)).toEqual(['3']);
    stream.add({ order: 2, n: 'd' }, { order: 3, n: 'e' });
    expect((await two.next()).map((m) => m.body)).toEqual([{ order: 2, n: 'd' }]);
    expect((await any.next()).map((m) => m.position)).toEqual(['4', '5']);
    expect(stream.reads).toEqual(['0']);
    expect(hub.readerCount).toBe(1);
    await hub.close();
    expect(stream.closed).toBe(1);
  });

  it('a subscriber that joins behind the reader gets what it missed from the history first, then the live messages, in order', async () => {
    const hub = new UpstreamHub();
    const stream = new MemoryStream();
    const early = hub.subscribe(stream, { since: null, accept: () => true });
    await waitFor(() => stream.reads.length === 1, { what: 'the reader to start' });
    stream.add({ order: 7, n: 1 }, { order: 8, n: 2 });
    expect(await early.next()).toHaveLength(2);
    // Joins at position 0: the two it missed come from range(0, 2).
    const late = hub.subscribe(stream, orderFilter(7, '0'));
    stream.add({ order: 7, n: 3 });
    const seen: JsonValue[] = [];
    while (seen.length < 2) seen.push(...(await late.next()).map((m) => m.body));
    expect(seen).toEqual([
      { order: 7, n: 1 },
      { order: 7, n: 3 },
    ]);
    expect(stream.ranges).toEqual([['0', '2']]);
    // Joining with no position: from now on, no history read.
    const now = hub.subscribe(stream, orderFilter(7, null));
    stream.add({ order: 7, n: 4 });
    expect((await now.next()).map((m) => m.body)).toEqual([{ order: 7, n: 4 }]);
    expect(stream.ranges).toHaveLength(1);
    expect(stream.reads).toHaveLength(1);
    await hub.close();
  });

  it("first(): a wait's one message, after which it has left the upstream (the reader lingers, then closes); cancel() rejects a wait", async () => {
    const hub = new UpstreamHub({ lingerMs: 10 });
    const stream = new MemoryStream();
    const waits = [1, 2].map((order) => hub.subscribe(stream, orderFilter(order)));
    const answers = waits.map((wait) => wait.first());
    await waitFor(() => stream.reads.length === 1, { what: 'the reader to start' });
    stream.add({ order: 1, n: 'a' }, { order: 1, n: 'b' });
    expect((await answers[0]!).body).toEqual({ order: 1, n: 'a' });
    expect(waits[0]!.closed).toBe(true);
    expect(waits[1]!.closed).toBe(false);
    // A wait whose trigger is cancelled: its pending first() and any later read reject with the reason.
    const reason = new Error('cancelled');
    waits[1]!.cancel(reason);
    await expect(answers[1]!).rejects.toBe(reason);
    await expect(waits[1]!.next()).rejects.toBe(reason);
    expect(waits[1]!.closed).toBe(true);
    // Nobody left: the reader closes after its linger.
    await waitFor(() => stream.closed === 1, { what: 'the idle reader to close' });
    expect(hub.readerCount).toBe(0);
    // A message already waiting: first() answers at once, and leaves.
    const late = hub.subscribe(stream, orderFilter(1, '0'));
    expect((await late.first()).body).toEqual({ order: 1, n: 'a' });
    expect(late.closed).toBe(true);
    await hub.close();
  });

  it('a subscriber that does not take its messages fails alone (DF_UPSTREAM_OVERFLOW); the others go on', async () => {
    const hub = new UpstreamHub();
    const stream = new MemoryStream();
    const slow = hub.subscribe(stream, { since: null, accept: () => true, capacity: 3 });
    const keen = hub.subscribe(stream, { since: null, accept: () => true });
    await waitFor(() => stream.reads.length === 1, { what: 'the reader to start' });
    stream.add(1, 2, 3, 4);
    expect((await keen.next()).map((m) => m.body)).toEqual([1, 2, 3, 4]);
    await expect(slow.next()).resolves.toHaveLength(3);
    await expect(slow.next()).rejects.toMatchObject({ code: 'DF_UPSTREAM_OVERFLOW', message: /more than 3 matching messages/ });
    stream.add(5);
    expect((await keen.next()).map((m) => m.body)).toEqual([5]);
    await hub.close();
  });

  it('a reader that fails fails its subscribers with its error; the next subscriber opens a new reader', async () => {
    const errors: string[] = [];
    const hub = new UpstreamHub({ onReaderError: (key, error) => errors.push(`${key}: ${(error as Error).message}`) });
    const stream = new MemoryStream();
    const a = hub.subscribe(stream, { since: null, accept: () => true });
    const b = hub.subscribe(stream, orderFilter(1));
    await waitFor(() => stream.reads.length === 1, { what: 'the reader to start' });
    stream.fail(new Error('connection refused'));
    await expect(a.next()).rejects.toThrow('connection refused');
    await expect(b.next()).rejects.toThrow('connection refused');
    expect(errors).toEqual(['memory:orders: connection refused']);
    expect(hub.readerCount).toBe(0);
    stream.failWith = null;
    const c = hub.subscribe(stream, { since: null, accept: () => true });
    await waitFor(() => stream.reads.length === 2, { what: 'a new reader' });
    stream.add('again');
    expect((await c.next()).map((m) => m.body)).toEqual(['again']);
    await hub.close();
  });

  it('closes a reader once nobody has read it for the linger, and keeps it for a subscriber that comes back sooner', async () => {
    const hub = new UpstreamHub({ lingerMs: 50 });
    const stream = new MemoryStream();
    const first = hub.subscribe(stream, { since: null, accept: () => true });
    await waitFor(() => stream.reads.length === 1, { what: 'the reader to start' });
    first.close();
    const again = hub.subscribe(stream, { since: null, accept: () => true });
    stream.add('kept');
    expect((await again.next()).map((m) => m.body)).toEqual(['kept']);
    again.close();
    await waitFor(() => stream.closed === 1, { what: 'the idle reader to close' });
    expect(hub.readerCount).toBe(0);
    expect(stream.reads).toHaveLength(1);
  });

  it('probes a match by its first field not holding an object', () => {
    expect(probeOf({ order: 42, kind: 'paid' })).toEqual({ field: 'order', value: 42 });
    expect(probeOf({ meta: { a: 1 }, tags: ['x'] })).toEqual({ field: 'tags', value: ['x'] });
    expect(probeOf({ meta: { a: 1 } })).toBeUndefined();
    expect(probeOf('text')).toBeUndefined();
    expect(probeOf(undefined)).toBeUndefined();
  });
});
