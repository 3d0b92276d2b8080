import type { Database } from '../../database/connect.ts';
import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { momentMs } from '../../model/schedule.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import { openStores } from '../../storage/index.ts';
import { serializedDagSource } from './dag-processor.ts';
import { unknownDagError } from './unknown-dag.ts';

/** A manual DAG run's options: its run id, logical date and conf. */
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
 * Given neither, the run is at `now`; a run of the DAG already there (triggered in the same
 * millisecond: a script's loop, calls made together) moves it to the next free millisecond.
 */
export async function triggerDagRun(database: Database, dagId: string, options: ManualRunOptions = {}, now = Date.now()): Promise<string> {
  const dag = await serializedDagSource(database)(dagId);
  if (!dag) throw await unknownDagError(database, dagId, 'dag-id');
  const asked = options.logicalDate === undefined ? now : parseLogicalDate(options.logicalDate);
  const attempts = options.logicalDate === undefined && options.runId === undefined ? SAME_MOMENT_ATTEMPTS : 1;
  const runIdAt = (logicalDate: number) => options.runId ?? `manual__${new Date(logicalDate).toISOString()}`;
  const storage = openStores(database);
  for (let attempt = 0; attempt < attempts; attempt++) {
    const logicalDate = asked + attempt;
    const runId = runIdAt(logicalDate);
    const created = await storage.dagRuns.createDagRun(dag, { runId, runType: 'manual', logicalDate, conf: options.conf ?? {} }, now);
    if (created !== null) return runId;
  }
  throw new InvalidOptionError(
    options.runId === undefined && options.logicalDate !== undefined ? 'logical-date' : 'run-id',
    `DAG ${dag.dagId} already has a run ${runIdAt(asked)} or a run at ${new Date(asked).toISOString()}`,
  );
}

/** Milliseconds after `now` an unnamed manual run may move to when earlier ones are taken. */
const SAME_MOMENT_ATTEMPTS = 100;

function parseLogicalDate(text: string): number {
  const ms = typeof text === 'string' ? momentMs(text.trim()) : null;
  if (ms === null)
    throw new InvalidOptionError('logical-date', `${JSON.stringify(text)} is not an ISO-8601 moment with an offset or Z, e.g. 2026-11-23T00:00:00Z`);
  return ms;
}
