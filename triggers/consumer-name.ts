import { canonicalJson, sha256Hex, type JsonValue } from '../src/vocabulary/serialization/json.ts';

/**
 * A watcher's default consumer name (a consumer group, a durable consumer, a queue, a session): `base`
 * for a watcher that takes every message of its source, else `base-<hash>` of what selects its
 * messages (its filter, its subject). Two watchers of one source with different filters must not
 * share a consumer: a broker hands each message to one consumer of a group, and the watcher whose
 * filter refuses a message would acknowledge it unseen by the other.
 */
export function defaultConsumerName(base: string, selectors: readonly (JsonValue | undefined)[], separator = '-'): string {
  if (selectors.every((selector) => selector === undefined)) return base;
  return `${base}${separator}${sha256Hex(canonicalJson(selectors.map((selector) => selector ?? null))).slice(0, 12)}`;
}
