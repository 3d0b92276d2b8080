import { InvalidOptionError } from '../vocabulary/errors.ts';
import { momentMs } from './schedule.ts';
import type { DagRunStates, DagRunStatesKey, DagRunStatesQuery } from './dag-run-states.ts';

export interface DagRunStateBatcherOptions {
  /** Least time between the starts of two rounds of queries, in ms: the most a read waits to join one. @default 1000 */
  readonly minGapMs?: number;
  /** Runs read per query; a round with more splits into several. @default 200 */
  readonly runsPerQuery?: number;
}

interface PendingRun {
  readonly key: DagRunStatesKey & { taskIds: string[] };
  readonly waiters: { readonly taskIds: readonly string[]; resolve(states: DagRunStates | null): void; reject(error: unknown): void }[];
}

/**
 * Answers many readers of DAG run states with few queries: reads that arrive before the next
 * round are gathered, identical runs asked once, and a round starts at most once per `minGapMs`.
 * However many sensors wait on other DAGs' runs (10,000 ExternalTaskSensors polling every few
 * seconds), one process then asks the database at most once a second (plus one query per
 * `runsPerQuery` distinct runs), never once per sensor. A read that finds its round in flight
 * joins the next one.
 */
export class DagRunStateBatcher {
  readonly #readRuns: (keys: readonly DagRunStatesKey[]) => Promise<DagRunStates[]>;
  readonly #minGapMs: number;
  readonly #runsPerQuery: number;
  #pending = new Map<string, PendingRun>();
  #timer: NodeJS.Timeout | null = null;
  #inFlight = false;
  #lastRoundAt = Number.NEGATIVE_INFINITY;
  /** Rounds and queries run so far (what a test or a metric counts). */
  rounds = 0;
  queries = 0;

  constructor(readRuns: (keys: readonly DagRunStatesKey[]) => Promise<DagRunStates[]>, options: DagRunStateBatcherOptions = {}) {
    this.#readRuns = readRuns;
    this.#minGapMs = options.minGapMs ?? 1000;
    this.#runsPerQuery = options.runsPerQuery ?? 200;
  }

  /** The run's states, or null while it does not exist; see DagRunStatesQuery. */
  read(query: DagRunStatesQuery): Promise<DagRunStates | null> {
    let key: DagRunStatesKey;
    try {
      key = keyOf(query);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      const runKey = `${key.dagId}\n${key.logicalDate}`;
      let pending = this.#pending.get(runKey);
      if (!pending) {
        pending = { key: { ...key, taskIds: [] }, waiters: [] };
        this.#pending.set(runKey, pending);
      }
      for (const taskId of key.taskIds) if (!pending.key.taskIds.includes(taskId)) pending.key.taskIds.push(taskId);
      pending.waiters.push({ taskIds: key.taskIds, resolve, reject });
      this.#schedule();
    });
  }

  /** Stops: reads not yet answered are refused with `reason`. */
  close(reason: unknown): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    const pending = [...this.#pending.values()];
    this.#pending = new Map();
    for (const run of pending) for (const waiter of run.waiters) waiter.reject(reason);
  }

  #schedule(): void {
    if (this.#timer !== null || this.#inFlight || this.#pending.size === 0) return;
    // Never 0 ms exactly: reads made in the same turn of the loop (a claim starting many triggers) share the round.
    const delay = Math.max(1, this.#lastRoundAt + this.#minGapMs - Date.now());
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.#round();
    }, delay);
  }

  async #round(): Promise<void> {
    this.#inFlight = true;
    this.#lastRoundAt = Date.now();
    this.rounds++;
    const runs = [...this.#pending.values()];
    this.#pending = new Map();
    try {
      for (let start = 0; start < runs.length; start += this.#runsPerQuery) {
        const chunk = runs.slice(start, start + this.#runsPerQuery);
        this.queries++;
        let found: DagRunStates[];
        try {
          found = await this.#readRuns(chunk.map((run) => run.key));
        } catch (error) {
          for (const run of chunk) for (const waiter of run.waiters) waiter.reject(error);
          continue;
        }
        const byRun = new Map(found.map((states) => [`${states.dagId}\n${Date.parse(states.logicalDate)}`, states]));
        for (const run of chunk) {
          const states = byRun.get(`${run.key.dagId}\n${run.key.logicalDate}`) ?? null;
          for (const waiter of run.waiters) waiter.resolve(states && onlyTasks(states, waiter.taskIds));
        }
      }
    } finally {
      this.#inFlight = false;
      this.#schedule();
    }
  }
}

/** The states with only the task instances this reader asked for. */
function onlyTasks(states: DagRunStates, taskIds: readonly string[]): DagRunStates {
  const taskStates = Object.fromEntries(taskIds.flatMap((taskId) => (states.taskStates[taskId] ? [[taskId, states.taskStates[taskId]]] : [])));
  return { ...states, taskStates };
}

/** The query checked: a DAG id, a logical date with its zone, task ids as text. */
function keyOf(query: DagRunStatesQuery): DagRunStatesKey {
  const invalid = (why: string) => new InvalidOptionError('dagRunStates', `${why}; pass { dagId, logicalDate: an ISO-8601 moment, taskIds?: [...] }`);
  if (query === null || typeof query !== 'object') throw invalid(`expected a query object, got ${JSON.stringify(query)}`);
  const { dagId, logicalDate, taskIds } = query;
  if (typeof dagId !== 'string' || dagId === '') throw invalid(`dagId ${JSON.stringify(dagId)} is not a DAG id`);
  // A string only: the query is JSON-like, as a trigger builds it.
  const ms = typeof logicalDate === 'string' ? momentMs(logicalDate) : null;
  if (ms === null) throw invalid(`logicalDate ${JSON.stringify(logicalDate)} is not an ISO-8601 moment with an offset or Z`);
  if (taskIds !== undefined && taskIds !== null && !(Array.isArray(taskIds) && taskIds.every((id) => typeof id === 'string' && id !== ''))) {
    throw invalid(`taskIds ${JSON.stringify(taskIds)} is not a list of task ids`);
  }
  return { dagId, logicalDate: ms, taskIds: taskIds ?? [] };
}
