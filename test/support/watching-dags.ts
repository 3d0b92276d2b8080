/**
 * DAGs scheduled on watchers, processed as DAG processing does (serialized rows, then the watcher
 * rows and links), without a DAG folder: for tests that run a triggerer in-process.
 */
import { Dag } from '../../src/authoring/dags/dag.ts';
import { SERIALIZED_DAG_VERSION, serializeDag } from '../../src/authoring/dags/serialized-dag.ts';
import { BaseOperator } from '../../src/authoring/operators/base-operator.ts';
import type { BaseTrigger } from '../../src/authoring/triggers/base-trigger.ts';
import { writeSerializedDag } from '../../src/storage/serialized-dags.ts';
import { syncDagWatchers } from '../../src/storage/sync-dag-watchers.ts';
import { expect } from 'vitest';
import { startTriggerer } from './in-process-triggerer.ts';
import { type TestDatabase, waitFor } from './fixtures.ts';

class Noop extends BaseOperator {
  execute() {
    return null;
  }
}

/** Each DAG (one task) scheduled on `watch` (null: not on watchers); `inactive`: DAGs marked deleted or paused. */
export async function processWatchingDags(
  db: TestDatabase,
  dags: readonly { dagId: string; watch: BaseTrigger | null; queue?: string }[],
  inactive: readonly string[] = [],
): Promise<void> {
  const context = { db: db.db, adapter: db.adapter, keyring: db.keyring };
  const built = dags.map(({ dagId, watch, queue }) =>
    new Dag({ dagId, ...(watch ? { schedule: { watch, ...(queue ? { queue } : {}) } } : {}) }).add(new Noop({ taskId: 'handle' })),
  );
  for (const dag of built) {
    const serialized = serializeDag(dag, `/dags/${dag.dagId}.ts`);
    await writeSerializedDag(
      context,
      { dagId: dag.dagId, fileloc: `/dags/${dag.dagId}.ts`, data: serialized.data, hash: serialized.hash, schemaVersion: SERIALIZED_DAG_VERSION },
      Date.now(),
    );
  }
  await syncDagWatchers(
    context,
    built.map((dag) => ({ dagId: dag.dagId, schedule: dag.watchSchedule })),
    inactive,
    Date.now(),
  );
}

/**
 * Shared watchers of one source, as a user sees them: two DAGs ('paid', 'refunds') scheduled on
 * `watcher` with different filters. Before anything is published, `started` must hold: by default
 * each watcher has written where it starts (a restart before its first event misses nothing); a
 * broker without history gives its own check (its queue or session there); `publish` adds messages from..to-1, message i being
 * `{ kind: 'paid' | 'refund' (by parity), n: i }`, and 40 of them make 20 runs of each DAG, then
 * `whileRunning` checks the broker. With that triggerer stopped, 40 more are added and
 * `startAgain` starts another, which reads on from the committed cursors: 40 runs each, none twice.
 */
export async function runSharedWatchers(
  db: TestDatabase,
  options: {
    readonly watcher: (kind: 'paid' | 'refund') => BaseTrigger;
    readonly publish: (from: number, to: number) => Promise<void>;
    readonly whileRunning: () => Promise<void>;
    readonly startAgain: () => Promise<unknown>;
    readonly started?: () => Promise<boolean>;
  },
): Promise<void> {
  await processWatchingDags(db, [
    { dagId: 'paid', watch: options.watcher('paid') },
    { dagId: 'refunds', watch: options.watcher('refund') },
  ]);
  const runsOf = async (dagId: string) => (await db.db.selectFrom('dag_run').select('run_id').where('dag_id', '=', dagId).execute()).length;
  const first = await startTriggerer(db);
  try {
    const started =
      options.started ?? (async () => (await db.db.selectFrom('trigger').select('cursor').where('cursor', 'is not', null).execute()).length === 2);
    await waitFor(started, { what: 'the watchers started', timeoutMs: 30_000 });
    await options.publish(0, 40);
    await waitFor(async () => (await runsOf('paid')) === 20 && (await runsOf('refunds')) === 20, { what: '20 runs of each DAG', timeoutMs: 30_000 });
    await options.whileRunning();
  } finally {
    await first.stop();
  }
  await options.publish(40, 80);
  await options.startAgain();
  await waitFor(async () => (await runsOf('paid')) === 40 && (await runsOf('refunds')) === 40, { what: '40 runs of each DAG', timeoutMs: 30_000 });
  const runIds = (await db.db.selectFrom('dag_run').select('run_id').execute()).map((row) => row.run_id);
  expect(new Set(runIds).size).toBe(80);
}
