import type { JsonValue } from '../serialization/json.ts';

/** What a trigger yields: its payload reaches every waiting task instance as next_kwargs.event. */
export class TriggerEvent<Payload extends JsonValue = JsonValue> {
  constructor(readonly payload: Payload) {}
}
