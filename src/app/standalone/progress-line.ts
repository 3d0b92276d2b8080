import type { RunProgress } from '../../storage/index.ts';

/** How a run's task instances group on the progress line. */
const GROUPS = {
  waiting: ['none', 'scheduled', 'queued', 'up_for_retry', 'up_for_reschedule'],
  running: ['running'],
  // Waiting without a slot: on a trigger, or for a person.
  deferred: ['deferred', 'awaiting_input'],
  done: ['success', 'failed', 'skipped', 'upstream_failed'],
} as const;

export interface ProgressFigures {
  readonly total: number;
  readonly waiting: number;
  readonly running: number;
  readonly deferred: number;
  readonly done: number;
  readonly failed: number;
}

export function progressFigures(progress: RunProgress): ProgressFigures {
  const sum = (states: readonly string[]) => states.reduce((total, state) => total + (progress.counts[state as keyof RunProgress['counts']] ?? 0), 0);
  const figures = {
    waiting: sum(GROUPS.waiting),
    running: sum(GROUPS.running),
    deferred: sum(GROUPS.deferred),
    done: sum(GROUPS.done),
    failed: sum(['failed', 'upstream_failed']),
  };
  return { ...figures, total: figures.waiting + figures.running + figures.deferred + figures.done };
}

/** `[#####.....] done 46/200 · deferred 150 · running 4 · waiting 0 · 6.2 s` */
export function progressLine(figures: ProgressFigures, elapsedMs: number, width = 20): string {
  const filled = figures.total === 0 ? 0 : Math.round((figures.done / figures.total) * width);
  const bar = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
  const failed = figures.failed > 0 ? ` (${figures.failed} failed)` : '';
  return `${bar} done ${figures.done}/${figures.total}${failed} · deferred ${figures.deferred} · running ${figures.running} · waiting ${figures.waiting} · ${(elapsedMs / 1000).toFixed(1)} s`;
}

/**
 * The closing summary: what the run cost in worker slots against what its tasks took. Had each
 * task held its slot while it waited, `slots` slots would have needed at least the tasks'
 * summed time divided by the slots; that is said only when it is longer than the run took, since
 * otherwise the waits were too short for holding slots to have slowed the run.
 */
export function summaryLine(
  run: { dagId: string; runId: string; state: string },
  progress: RunProgress,
  finishedTaskMs: number,
  wallMs: number,
  slots: number,
  slotMs: number,
): string {
  const figures = progressFigures(progress);
  const blockingMs = finishedTaskMs / slots;
  const comparison =
    blockingMs > wallMs ? `; holding a slot while waiting, ${slots} slot${slots === 1 ? '' : 's'} would have needed at least ${secondsText(blockingMs)}.` : '.';
  // Slot time can exceed the tasks' time (a slot is held from the claim to the outcome's write,
  // and through failed tries): "of which" only when it is a part of it.
  const heldText = `${(slotMs / 1000).toFixed(1)} s`;
  const held =
    slotMs <= finishedTaskMs
      ? `, of which they held worker slots for ${heldText}`
      : `; worker slots were held for ${heldText} (claims, retries and writes included)`;
  return (
    `${run.dagId} ${run.runId}: ${run.state} in ${(wallMs / 1000).toFixed(1)} s. ` +
    `${figures.total} task${figures.total === 1 ? '' : 's'} took ${secondsText(finishedTaskMs)} in all, waits included${held}` +
    comparison
  );
}

/** Seconds with a decimal below 10 s, where whole seconds would round a short run to 0. */
function secondsText(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 9950 ? 1 : 0)} s`;
}
