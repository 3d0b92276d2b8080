import type { StorageContext } from './context.ts';
import { listActiveDags, listImportErrors, listSerializedDags, readSerializedDag } from './serialized-dags.ts';

/** Serialized DAGs: listSerializedDags, readSerializedDag, listImportErrors, listActiveDags. */
export class SerializedDagStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  listSerializedDags(): Promise<{ dagId: string; fileloc: string; dataJson: string }[]> {
    return listSerializedDags(this.#context);
  }

  /** A DAG's stored JSON (text), hash and file; null when deleted or unknown. */
  readSerializedDag(dagId: string): Promise<{ data: string; hash: string; fileloc: string } | null> {
    return readSerializedDag(this.#context, dagId);
  }

  listImportErrors(): Promise<{ fileloc: string; message: string }[]> {
    return listImportErrors(this.#context);
  }

  listActiveDags(): Promise<{ dagId: string; hash: string }[]> {
    return listActiveDags(this.#context);
  }
}
