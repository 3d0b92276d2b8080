import { setDagPaused } from './sync-dag-watchers.ts';
import type { StorageContext } from './context.ts';
import { listActiveDags, listImportErrors, listSerializedDags, readSerializedDag } from './serialized-dags.ts';
import { listDagWatchers, type DagWatcherListing } from './list-dag-watchers.ts';

/** Serialized DAGs: listSerializedDags, readSerializedDag, listImportErrors, listActiveDags, listDagWatchers, setDagPaused. */
export class SerializedDagStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  listSerializedDags(): Promise<{ dagId: string; fileloc: string; dataJson: string; paused: boolean }[]> {
    return listSerializedDags(this.#context);
  }

  /** A DAG's stored JSON (text), hash and file; null when deleted or unknown. */
  readSerializedDag(dagId: string): Promise<{ data: string; hash: string; fileloc: string; paused: boolean } | null> {
    return readSerializedDag(this.#context, dagId);
  }

  listImportErrors(): Promise<{ fileloc: string; message: string }[]> {
    return listImportErrors(this.#context);
  }

  listActiveDags(): Promise<{ dagId: string; hash: string; paused: boolean }[]> {
    return listActiveDags(this.#context);
  }

  /** The watchers DAGs are scheduled on (of `dagId`, or of every DAG), with owner, cursor and last event. */
  listDagWatchers(dagId?: string): Promise<DagWatcherListing[]> {
    return listDagWatchers(this.#context, dagId);
  }

  /** Pauses or unpauses a DAG (see setDagPaused); false when there is no such DAG. */
  setDagPaused(dagId: string, paused: boolean): Promise<boolean> {
    return setDagPaused(this.#context, dagId, paused);
  }
}
