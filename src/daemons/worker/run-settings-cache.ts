import { dagFileVersion, WORKER_RECHECK_MS } from '../../authoring/dags/loader.ts';
import type { RetryPolicy } from '../../model/retry-policy.ts';
import type { ClaimedTaskInstance } from '../../storage/index.ts';

/** What the worker must know of a task before it starts a try: how tries are retried and timed out. */
export interface RunSettings {
  readonly retry: RetryPolicy;
  /** The whole task's time budget, deferrals included, in ms; null for none. */
  readonly executionTimeoutMs: number | null;
}

/** The run settings of every task of a DAG, by task id, as a runner found them in one version of its file. */
export type DagRunSettings = ReadonlyMap<string, RunSettings>;

interface CachedDag {
  /** The DAG file's version the settings were read from. */
  readonly version: string;
  /** The user's own modules the file imports (its version covers them: see dagFileVersion). */
  readonly localImports: readonly string[];
  readonly tasks: DagRunSettings;
  /** The file's version when the worker last looked, and when that was (performance.now()). */
  current: string;
  checkedAt: number;
}

/**
 * The run settings of the DAGs' tasks as task runner processes last loaded them, so that the
 * worker starts a task without first asking a runner to load it: the run is then the one round
 * trip to a runner, which loads the task itself (its copy of the DAG file is cached too). With
 * short tasks a runner otherwise spent half its time waiting for the worker between the two
 * (bench:runtime on PostgreSQL: one runner served all 8 slots, busy the whole time).
 *
 * Settings are trusted while the DAG file keeps the version they were read from, looked at no
 * more than every WORKER_RECHECK_MS, the staleness the runners' own view of a DAG file has: an
 * edit is seen by tasks starting that long after it, which then go to a runner to be prepared.
 */
export class RunSettingsCache {
  readonly #dags = new Map<string, CachedDag>();

  /** The task's settings if they are known for its DAG file as it is now; null to ask a runner. */
  async lookup(claimed: ClaimedTaskInstance): Promise<RunSettings | null> {
    if (claimed.fileloc === null) return null;
    const cached = this.#dags.get(keyOf(claimed.fileloc, claimed.dagId));
    const settings = cached?.tasks.get(claimed.taskId);
    if (cached === undefined || settings === undefined) return null;
    if (performance.now() - cached.checkedAt >= WORKER_RECHECK_MS) {
      try {
        cached.current = await dagFileVersion(claimed.fileloc, cached.localImports);
      } catch {
        return null; // gone or unreadable: the runner says what is wrong
      }
      cached.checkedAt = performance.now();
    }
    return cached.current === cached.version ? settings : null;
  }

  /** What a runner found preparing a task of `claimed`'s DAG, in a version of its file (null if unknown). */
  store(claimed: ClaimedTaskInstance, file: { readonly version: string; readonly localImports: readonly string[] } | null, tasks: DagRunSettings): void {
    if (claimed.fileloc === null || file === null) return;
    const { version, localImports } = file;
    this.#dags.set(keyOf(claimed.fileloc, claimed.dagId), { version, localImports, tasks, current: version, checkedAt: performance.now() });
  }
}

function keyOf(fileloc: string, dagId: string): string {
  return `${fileloc}\u0000${dagId}`;
}
