import { closestName } from '../config/suggest.ts';
import type { Database } from '../db/connect.ts';
import { InvalidOptionError } from '../errors.ts';
import { Storage } from '../storage/index.ts';

/**
 * The refusal of a DAG id the database has no serialized DAG for (`deferflow dags trigger`,
 * `dags runs`, an embedded triggerDagRun), naming under `option` the DAG it most resembles: a
 * mistyped id reads as a typo, not as a DAG that vanished.
 */
export async function unknownDagError(database: Database, dagId: string, option: string): Promise<InvalidOptionError> {
  const known = (await new Storage(database).listActiveDags()).map((dag) => dag.dagId);
  const meant = closestName(dagId, known);
  return new InvalidOptionError(
    option,
    `no DAG ${JSON.stringify(dagId)} among the serialized DAGs (${meant ? `did you mean ${meant}? ` : ''}see deferflow dags list)`,
  );
}
