import type { Database } from '../db/connect.ts';
import { InvalidOptionError } from '../errors.ts';
import { momentMs } from '../model/schedule.ts';
import type { JsonObject } from '../serialization/json.ts';
import { Storage } from '../storage/index.ts';
import { serializedDagSource } from './dag-processor.ts';

export interface ManualRunOptions {
  /** The run's conf. @default {} */
  readonly conf?: JsonObject;
  /** @default `manual__<logical date>` */
  readonly runId?: string;
  /** The run's logical date: ISO-8601 with an offset or Z (Airflow's `dags trigger -e`). @default now */
  readonly logicalDate?: string;
}

/**
 * Creates a manual run of a serialized DAG (`deferflow dags trigger`, standalone's
 * --trigger-dag) and returns its run id. Refuses, naming the option, a DAG the database does
 * not know, a logical date that names no moment, and a run id or logical date the DAG already has.
 */
export async function triggerDagRun(database: Database, dagId: string, options: ManualRunOptions = {}, now = Date.now()): Promise<string> {
  const dag = await serializedDagSource(database)(dagId);
  if (!dag) throw new InvalidOptionError('dag-id', `no DAG ${JSON.stringify(dagId)} among the serialized DAGs (see deferflow dags list)`);
  const logicalDate = options.logicalDate === undefined ? now : parseLogicalDate(options.logicalDate);
  const runId = options.runId ?? `manual__${new Date(logicalDate).toISOString()}`;
  const created = await new Storage(database).createDagRun(dag, { runId, runType: 'manual', logicalDate, conf: options.conf ?? {} }, now);
  if (created === null) {
    throw new InvalidOptionError(
      options.runId === undefined && options.logicalDate !== undefined ? 'logical-date' : 'run-id',
      `DAG ${dag.dagId} already has a run ${runId} or a run at ${new Date(logicalDate).toISOString()}`,
    );
  }
  return runId;
}

function parseLogicalDate(text: string): number {
  const ms = typeof text === 'string' ? momentMs(text.trim()) : null;
  if (ms === null)
    throw new InvalidOptionError('logical-date', `${JSON.stringify(text)} is not an ISO-8601 moment with an offset or Z, e.g. 2026-11-23T00:00:00Z`);
  return ms;
}
