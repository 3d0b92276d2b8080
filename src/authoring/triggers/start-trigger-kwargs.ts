import { DateTime, Duration } from 'luxon';
import { InvalidSerializedDagError } from '../../vocabulary/errors.ts';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';

/**
 * A start trigger is serialized with its DAG, long before the task starts, so a moment relative
 * to the task's start cannot be written down as a moment yet. Its kwargs hold a placeholder
 * instead, `{ "$nowPlus": "<ISO-8601 duration>" }`, which the scheduler turns into the ISO moment
 * when it defers the task (calendar units added in UTC, as TimeDeltaTrigger does).
 */
export const NOW_PLUS = '$nowPlus';

/** A placeholder in a start trigger's kwargs for "the moment the task instance starts, plus delta", filled in when it defers. */
export function nowPlusPlaceholder(delta: Duration): JsonObject {
  return { [NOW_PLUS]: delta.toISO() };
}

/** `kwargs` with every placeholder replaced by the moment it names, counted from `now`. */
export function renderStartTriggerKwargs(kwargs: JsonObject, now: number, dagId: string): JsonObject {
  const render = (value: JsonValue, at: string): JsonValue => {
    if (Array.isArray(value)) return value.map((item, index) => render(item, `${at}[${index}]`));
    if (value === null || typeof value !== 'object') return value;
    if (Object.hasOwn(value, NOW_PLUS)) {
      const delta = Duration.fromISO(String(value[NOW_PLUS]));
      if (!delta.isValid) throw new InvalidSerializedDagError(dagId, at, `holds ${JSON.stringify(value[NOW_PLUS])}, not an ISO-8601 duration`);
      return DateTime.fromMillis(now, { zone: 'utc' }).plus(delta).toISO();
    }
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, render(item, `${at}.${key}`)]));
  };
  return render(kwargs, 'start_trigger.kwargs') as JsonObject;
}
