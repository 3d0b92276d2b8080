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
import type { TestDatabase } from './fixtures.ts';

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
