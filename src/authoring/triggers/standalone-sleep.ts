// Node clamps a timer longer than 2^31-1 ms to 1 ms; longer waits go in steps.
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** sleepUntil for a trigger run outside a triggerer (a unit test calling run() directly). */
export function sleepUntil(epochMs: number): Promise<void> {
  return new Promise((resolve) => {
    const tick = () => {
      const remaining = epochMs - Date.now();
      if (remaining <= 0) resolve();
      else setTimeout(tick, Math.min(remaining, MAX_TIMER_MS));
    };
    tick();
  });
}
