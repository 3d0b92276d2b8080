/*
 * Queues route work to groups of daemons (issue 45): a task may name a queue, the triggers it
 * defers on inherit it, and a worker or triggerer started with `--queues a,b` takes only work in
 * those queues. Work that names none is in the queue named `default`, stored by that name (a
 * column default, so rows from before queues are in it), and a daemon without `--queues` serves
 * `default` only; `default` may be listed with others (`--queues default,gpu`) to serve both.
 * Every queue is a stored name, never null: each claim reads one queue as an equality on the
 * first column of its index, which both dialects then walk in claim order (PostgreSQL does not
 * for `IS NULL`: it sorts every matching row).
 */

/** The queue of work that names none, and of daemons given no `--queues`. */
export const DEFAULT_QUEUE = 'default';

/** Letters, digits, `.`, `_` and `-`, 1 to 64 characters: safe in flags, env lists, URLs and metric labels. */
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Why a queue name or list was refused (the caller wraps it in its own error, naming where it came from). */
export class QueueNameProblem extends Error {}

/** A queue name as given (a task's `queue`, one of `--queues`), checked; none is `default`. */
export function checkQueue(name: unknown): string {
  if (name === undefined || name === null) return DEFAULT_QUEUE;
  if (typeof name !== 'string' || !QUEUE_NAME.test(name))
    throw new QueueNameProblem(
      `queue must be a name of letters, digits, '.', '_' or '-' (1 to 64 characters, starting with a letter or digit), got ${JSON.stringify(name)}`,
    );
  return name;
}

/** The queues a daemon serves, as its claims filter on them: distinct, sorted, at least one. */
export type QueueSet = readonly string[];

/** What a daemon given no `--queues` serves. */
export const DEFAULT_QUEUES: QueueSet = Object.freeze([DEFAULT_QUEUE]);

/** `--queues` as given (a list, or comma-separated text; empty: the default), checked. */
export function queueSetOf(value: unknown): QueueSet {
  const names = (Array.isArray(value) ? value.map(String) : String(value ?? '').split(',')).map((name) => name.trim()).filter((name) => name !== '');
  if (names.length === 0) return DEFAULT_QUEUES;
  return Object.freeze([...new Set(names.map(checkQueue))].sort());
}

/** The queue names a set serves, as a job row records them and `--queues` takes them back: `default,gpu`. */
export function queueListText(queues: QueueSet): string {
  return queues.join(',');
}
