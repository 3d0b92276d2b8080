import type { Database } from '../db/connect.ts';
import { InvalidOptionError } from '../errors.ts';
import type { JsonObject } from '../serialization/json.ts';
import { Storage } from '../storage/index.ts';
import { serializedDagSource } from './dag-processor.ts';

/**
 * Creates a manual run of a serialized DAG (`deferflow dags trigger`, standalone's
 * --trigger-dag) and returns its run id. Refuses, naming the option, a DAG the database does
 * not know and a run id the DAG already has.
 */
export async function triggerDagRun(database: Database, dagId: string, options: { conf?: JsonObject; runId?: string } = {}, now = Date.now()): Promise<string> {
  const dag = await serializedDagSource(database)(dagId);
  if (!dag) throw new InvalidOptionError('dag-id', `no DAG ${JSON.stringify(dagId)} among the serialized DAGs (see deferflow dags list)`);
  const runId = options.runId ?? `manual__${new Date(now).toISOString()}`;
  const created = await new Storage(database).createDagRun(dag, { runId, runType: 'manual', logicalDate: now, conf: options.conf ?? {} }, now);
  if (created === null) throw new InvalidOptionError('run-id', `DAG ${dag.dagId} already has a run ${runId}`);
  return runId;
}
