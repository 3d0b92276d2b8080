import { expect } from 'vitest';

/** The message of the DF_INVALID_TRIGGER_ARGUMENT that `Trigger` throws for `kwargs` (a test fails if it accepts them). */
export function triggerRefusal(Trigger: new (kwargs: never) => unknown, kwargs: unknown): string {
  try {
    new Trigger(kwargs as never);
  } catch (error) {
    expect((error as { code: string }).code).toBe('DF_INVALID_TRIGGER_ARGUMENT');
    return (error as Error).message;
  }
  throw new Error(`${Trigger.name} accepted ${JSON.stringify(kwargs)}`);
}
