import type { SerializedTrigger, SerializedWatcher } from '../src/authoring/triggers/base-trigger.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import { WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import { probeOf, type UpstreamFilter, type UpstreamMessage, type UpstreamSubscription } from '../src/authoring/triggers/upstream-hub.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';

/** A built-in broker trigger's filter on its shared upstream: the messages after `since` whose body holds `match`, indexed by its probe. */
export function matchFilter(since: string | null, match: JsonValue | undefined, capacity?: number): UpstreamFilter {
  return {
    since,
    accept: (message) => match === undefined || matches(message.body, match),
    probe: probeOf(match),
    ...(capacity === undefined ? {} : { capacity }),
  };
}

/** The most matching messages a shared watcher lets wait for it: behind by more (its database slow), it fails and runs again from its cursor. */
export function watcherCapacity(batch: number): number {
  return Math.max(1000, batch * 10);
}

/**
 * A shared watcher's life on `upstream`: its messages handed over `batch` at a time, each message's
 * key and payload from `eventOf`, each batch's cursor from `cursorOf` its last message; the upstream
 * left when the watcher stops.
 */
export async function* inBatches(
  upstream: UpstreamSubscription,
  batch: number,
  eventOf: (message: UpstreamMessage) => { key: string; payload: JsonValue },
  cursorOf: (last: UpstreamMessage) => JsonValue,
): AsyncGenerator<WatchEvents> {
  try {
    for (;;) {
      const messages = await upstream.next();
      for (let from = 0; from < messages.length; from += batch) {
        const taken = messages.slice(from, from + batch);
        yield new WatchEvents(taken.map(eventOf), cursorOf(taken.at(-1)!));
      }
    }
  } finally {
    upstream.close();
  }
}

/**
 * A shared watcher of a broker without history (MQTT, RabbitMQ) as a DAG stores it: its row's
 * kwargs without `match`, so that the shared watchers of DAGs that differ only in it are one row,
 * one queue or session; `match` becomes the DAG's event filter, on the event's `message`.
 */
export function matchAsEventFilter(serialized: SerializedTrigger, match: JsonValue | undefined): SerializedWatcher {
  if (match === undefined) return serialized;
  const { match: _match, ...kwargs } = serialized.kwargs;
  return { classpath: serialized.classpath, kwargs, eventFilter: { message: match } };
}
