import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { closestName } from '../../vocabulary/suggest.ts';
import type { Database } from '../../database/connect.ts';
import { DagImportError, InvalidOptionError } from '../../vocabulary/errors.ts';
import { openStores } from '../../storage/index.ts';

/**
 * The refusal of a DAG id the database has no serialized DAG for (`deferflow dags trigger`,
 * `dags runs`, an embedded triggerDagRun). A DAG whose file failed to import is named with
 * that file and its error (DF_DAG_IMPORT): a file named after the DAG, or one that spells its id
 * in quotes (read where this process can read it). Otherwise the DAG it most resembles is named
 * under `option` (a mistyped id reads as a typo, not as a DAG that vanished), and files that
 * failed to import, which might define it, are counted.
 */
export async function unknownDagError(database: Database, dagId: string, option: string): Promise<InvalidOptionError | DagImportError> {
  const storage = openStores(database);
  const [dags, importErrors] = await Promise.all([storage.serializedDags.listActiveDags(), storage.serializedDags.listImportErrors()]);
  const defining = [];
  for (const importError of importErrors) if (await mayDefine(importError.fileloc, dagId)) defining.push(importError);
  if (defining.length > 0) {
    const files = defining.map(({ fileloc, message }) => `${fileloc} failed to import: ${message}`).join('; ');
    return new DagImportError(
      `DAG ${JSON.stringify(dagId)} is not among the serialized DAGs because ${defining.length === 1 ? 'the file that defines it' : 'a file that may define it'} did not import: ${files}; fix the file (deferflow dags list shows import errors), then try again`,
    );
  }
  const meant = closestName(
    dagId,
    dags.map((dag) => dag.dagId),
  );
  const broken = importErrors.length === 0 ? '' : `; ${importErrors.length} DAG file(s) failed to import (see deferflow dags list)`;
  return new InvalidOptionError(
    option,
    `no DAG ${JSON.stringify(dagId)} among the serialized DAGs (${meant ? `did you mean ${meant}? ` : ''}see deferflow dags list)${broken}`,
  );
}

/** Whether a DAG file that failed to import may define `dagId`: it is named after it, or spells the id in quotes. */
async function mayDefine(fileloc: string, dagId: string): Promise<boolean> {
  if (path.basename(fileloc).replace(/\.[^.]+$/, '') === dagId) return true;
  try {
    const source = await readFile(fileloc, 'utf8');
    return ['"', "'", '`'].some((quote) => source.includes(`${quote}${dagId}${quote}`));
  } catch {
    // Not readable from here (another host's DAG folder): only its name can tell.
    return false;
  }
}
