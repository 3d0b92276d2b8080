import { TriggerFailedError } from '../../vocabulary/errors.ts';
import { performance } from 'node:perf_hooks';
import { MAX_TIMER_MS } from '../../authoring/triggers/standalone-sleep.ts';

/** What the queue needs of a waiter; the runner's per-trigger record is one, so a wait allocates no node. */
export interface DeadlineWaiter {
  wakeAt: number;
  /** Position in the heap, -1 when not queued. */
  heapIndex: number;
  resolveWait: (() => void) | null;
  rejectWait: ((reason: unknown) => void) | null;
}

export interface ResumeHooks<W extends DeadlineWaiter> {
  /** Called just before a waiter is resumed. */
  beforeResume(waiter: W): void;
  /** Called once the resumed waiter's synchronous continuation has run. */
  afterResume(waiter: W): void;
}

// Below this a wait is armed exactly; above it the timer is armed early by the kernel's
// expected lateness (~0.1%, at most 100 ms) and finished with a short exact timer.
const EXACT_BELOW_MS = 50;
// Microtask hops after a resume before the next one: an `await` on our promise resumes in one,
// a helper async function wrapped around it in up to three.
const CONTINUATION_HOPS = 3;
// Resuming 100,000 due waiters takes a few hundred ms of CPU. In slices of this long, with a
// macrotask turn between them, the outcome writer starts on the first ones (on PostgreSQL the
// database then works while this process resumes the rest) and heartbeats keep their turn.
const RESUME_SLICE_MS = 10;

/**
 * One timer for every sleeping trigger: a binary min-heap of waiters keyed by wall-clock wake
 * time, with a single Node timer armed for the earliest. 100,000 sleeping triggers cost 100,000
 * heap slots, not 100,000 Timeout objects. Waiters never wake before their moment, and waits
 * longer than Node's 24.8-day timer limit re-arm in steps.
 *
 * Due waiters are resumed one at a time, each after the previous one's continuation ran, so
 * the hooks see exactly which trigger's code ran between them (how a slow step is named), in
 * slices of RESUME_SLICE_MS with a turn of the event loop between slices.
 */
export class DeadlineQueue<W extends DeadlineWaiter> {
  readonly #heap: W[] = [];
  #timer: NodeJS.Timeout | null = null;
  #timerFiresAt = Number.POSITIVE_INFINITY;
  readonly #hooks: ResumeHooks<W> | null;

  constructor(hooks: ResumeHooks<W> | null = null) {
    this.#hooks = hooks;
  }

  get size(): number {
    return this.#heap.length;
  }

  /** Resolves at `wakeAt` (epoch ms); rejects if `cancel(waiter)` comes first. One wait per waiter. */
  wait(waiter: W, wakeAt: number): Promise<void> {
    if (waiter.heapIndex !== -1)
      this.cancel(
        waiter,
        new TriggerFailedError('a trigger may sleep in one place at a time: it called sleep()/sleepUntil() again before the first one resolved'),
      );
    const promise = new Promise<void>((resolve, reject) => {
      waiter.resolveWait = resolve;
      waiter.rejectWait = reject;
    });
    waiter.wakeAt = wakeAt;
    this.#push(waiter);
    if (waiter.heapIndex === 0) this.#arm();
    return promise;
  }

  /**
   * Removes the waiter's pending wait, rejecting it with `reason`: also a wait already due but
   * not resumed yet (a later slice). No-op when it is not waiting.
   */
  cancel(waiter: W, reason: unknown): void {
    if (waiter.heapIndex !== -1) this.#removeAt(waiter.heapIndex);
    const reject = waiter.rejectWait;
    waiter.resolveWait = waiter.rejectWait = null;
    reject?.(reason);
  }

  /** Stops the timer; pending waits stay pending. */
  close(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerFiresAt = Number.POSITIVE_INFINITY;
  }

  #arm(): void {
    const top = this.#heap[0];
    if (!top) {
      this.close();
      return;
    }
    const now = Date.now();
    const remaining = top.wakeAt - now;
    const delay =
      remaining <= 0 ? 0 : remaining <= EXACT_BELOW_MS ? remaining : Math.min(remaining - Math.min(100, Math.ceil(remaining / 1000)) - 2, MAX_TIMER_MS);
    const firesAt = now + delay;
    if (this.#timer && firesAt >= this.#timerFiresAt) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timerFiresAt = firesAt;
    this.#timer = setTimeout(() => this.#onTimer(), delay);
    this.#timer.unref();
  }

  #onTimer(): void {
    this.#timer = null;
    this.#timerFiresAt = Number.POSITIVE_INFINITY;
    const now = Date.now();
    const due: W[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.wakeAt <= now) {
      const waiter = this.#heap[0]!;
      this.#removeAt(0);
      due.push(waiter);
    }
    this.#arm();
    this.#resumeInTurn(due, 0);
  }

  #resumeInTurn(due: W[], from: number, sliceStartedAt = performance.now()): void {
    for (let index = from; index < due.length; index++) {
      if (performance.now() - sliceStartedAt > RESUME_SLICE_MS) {
        setImmediate(() => this.#resumeInTurn(due, index));
        return;
      }
      const waiter = due[index]!;
      const resolve = waiter.resolveWait;
      waiter.resolveWait = waiter.rejectWait = null;
      // Cancelled while it waited for its slice: nothing to resume.
      if (!resolve) continue;
      if (!this.#hooks) {
        resolve();
        continue;
      }
      this.#hooks.beforeResume(waiter);
      resolve();
      let hop = Promise.resolve();
      for (let i = 1; i < CONTINUATION_HOPS; i++) hop = hop.then();
      void hop.then(() => {
        this.#hooks!.afterResume(waiter);
        this.#resumeInTurn(due, index + 1, sliceStartedAt);
      });
      return;
    }
  }

  #push(waiter: W): void {
    waiter.heapIndex = this.#heap.length;
    this.#heap.push(waiter);
    this.#siftUp(waiter.heapIndex);
  }

  #removeAt(index: number): void {
    const heap = this.#heap;
    const removed = heap[index]!;
    const last = heap.pop()!;
    removed.heapIndex = -1;
    if (index < heap.length) {
      heap[index] = last;
      last.heapIndex = index;
      this.#siftDown(index);
      this.#siftUp(last.heapIndex);
    }
  }

  #siftUp(index: number): void {
    const heap = this.#heap;
    const item = heap[index]!;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = heap[parentIndex]!;
      if (parent.wakeAt <= item.wakeAt) break;
      heap[index] = parent;
      parent.heapIndex = index;
      index = parentIndex;
    }
    heap[index] = item;
    item.heapIndex = index;
  }

  #siftDown(index: number): void {
    const heap = this.#heap;
    const item = heap[index]!;
    const half = heap.length >> 1;
    while (index < half) {
      let childIndex = 2 * index + 1;
      const right = childIndex + 1;
      if (right < heap.length && heap[right]!.wakeAt < heap[childIndex]!.wakeAt) childIndex = right;
      const child = heap[childIndex]!;
      if (item.wakeAt <= child.wakeAt) break;
      heap[index] = child;
      child.heapIndex = index;
      index = childIndex;
    }
    heap[index] = item;
    item.heapIndex = index;
  }
}
