import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Database } from '../../database/connect.ts';
import { DagFolderError, errorFields, InvalidDagError, InvalidOptionError } from '../../vocabulary/errors.ts';
import {
  activeDagFilelocs,
  markMissingDagsDeleted,
  readSerializedDag,
  readSerializedDagHash,
  replaceImportErrors,
  writeSerializedDag,
  type SerializedDagWrite,
} from '../../storage/serialized-dags.ts';
import type { DagSource, SchedulerDag, WatchSchedule } from '../../model/scheduler-dag.ts';
import { syncDagWatchers, watcherRowHash, type DagWatchers } from '../../storage/sync-dag-watchers.ts';

import { loadDagFolder, type DagFileError } from '../../authoring/dags/loader.ts';
import { SERIALIZED_DAG_VERSION, serializeDag, toSchedulerDag } from '../../authoring/dags/serialized-dag.ts';

export interface ProcessResult {
  readonly written: Readonly<Record<string, SerializedDagWrite>>;
  readonly deleted: readonly string[];
  readonly errors: readonly DagFileError[];
  /** Files loaded in a way Node never unloads, with why (see DagFolder.unreloadable). */
  readonly unreloadable: readonly DagFileError[];
}

export interface ProcessOptions {
  /**
   * Mark deleted the DAGs of every file not found, even when the folder holds none of the files
   * processed before (see processDagFolder). Off by default: that is what a mistyped folder does.
   */
  readonly removeMissing?: boolean;
}

/**
 * DAG processing: loads the DAG folder and records what the scheduler and the CLI read instead
 * of DAG code: each DAG's serialized JSON (rewritten only when its hash changed), DAGs gone from
 * the folder marked deleted, and one import error per file that could not be loaded.
 *
 * A folder that holds none of the DAG files processed before is refused with DF_DAG_FOLDER and
 * changes nothing: that is a wrong --dags (a typo, an unmounted volume), not every DAG deleted at
 * once, and marking them deleted would stall their runs. `removeMissing` says it is meant.
 */
export async function processDagFolder(database: Database, folder: string, options: ProcessOptions = {}, now = Date.now()): Promise<ProcessResult> {
  const context = { db: database.db, adapter: database.adapter, keyring: database.keyring };
  await assertDagFolder(folder);
  const loaded = await loadDagFolder(folder);
  if (!options.removeMissing) {
    const known = await activeDagFilelocs(context);
    const found = new Set(loaded.files);
    if (known.length > 0 && !known.some((fileloc) => found.has(fileloc))) {
      throw new DagFolderError(
        `${path.resolve(folder)} holds none of the ${known.length} DAG file(s) processed before (e.g. ${known[0]}); ` +
          'refusing to mark their DAGs deleted. Check --dags (or DEFERFLOW_DAGS_FOLDER); if the DAGs were moved or removed on purpose, ' +
          `run \`deferflow dags reserialize --dags ${folder} --remove-missing\` once`,
      );
    }
  }
  const errors: DagFileError[] = [...loaded.errors];
  const written: Record<string, SerializedDagWrite> = {};
  const watchers: DagWatchers[] = [];
  const consumers = new Map<string, { dagId: string; row: string }>();
  for (const { dag, fileloc } of loaded.dags) {
    let serialized: ReturnType<typeof serializeDag>;
    try {
      serialized = serializeDag(dag, fileloc);
      claimWatcherConsumers(dag.dagId, dag.watchSchedule, consumers, database.keyring);
    } catch (error) {
      errors.push({ fileloc, message: (error as Error).message });
      continue;
    }
    written[dag.dagId] = await writeSerializedDag(
      context,
      { dagId: dag.dagId, fileloc, data: serialized.data, hash: serialized.hash, schemaVersion: SERIALIZED_DAG_VERSION },
      now,
    );
    watchers.push({ dagId: dag.dagId, schedule: dag.watchSchedule });
  }
  const brokenFiles = [...new Set(errors.map((error) => error.fileloc))];
  const deleted = await markMissingDagsDeleted(context, Object.keys(written), brokenFiles, now);
  // Every pass, not only when a DAG changed: a pass that failed half-way is made good by the next.
  await syncDagWatchers(context, watchers, deleted, now);
  await replaceImportErrors(context, errors, now);
  return { written, deleted, errors, unreloadable: loaded.unreloadable };
}

/**
 * Records which broker-side consumer each watcher of `dagId` reads through, refusing (DF_INVALID_DAG)
 * one that another DAG's different watcher row already reads: a queue, group, durable consumer or
 * session read by two rows hands each message to one of them, so each DAG would silently miss the
 * other's share. Alike watchers are one row and share it.
 */
function claimWatcherConsumers(
  dagId: string,
  schedule: WatchSchedule | null,
  consumers: Map<string, { dagId: string; row: string }>,
  keyring: Database['keyring'],
): void {
  // Watchers are the same row when their row hashes are (syncDagWatchers makes the rows by them).
  const wanted = (schedule?.watchers ?? []).flatMap((watcher, index) =>
    watcher.consumer === undefined ? [] : [{ index, consumer: watcher.consumer, row: watcherRowHash(keyring, watcher, schedule!.queue) }],
  );
  const own = new Map<string, { dagId: string; row: string }>();
  for (const { index, consumer, row } of wanted) {
    const claimed = own.get(consumer) ?? consumers.get(consumer);
    if (claimed !== undefined && claimed.row !== row) {
      const by = claimed.dagId === dagId ? 'another of its watchers' : `a different watcher of DAG ${claimed.dagId}`;
      throw new InvalidDagError(
        `DAG ${dagId}: schedule.watch[${index}] reads through ${consumer}, which ${by} reads (their kwargs or queues differ): ` +
          'each would take messages the other never sees. Make the watchers alike (one row serves both), or give this one its own queue, group, consumer or session',
      );
    }
    own.set(consumer, { dagId, row });
  }
  for (const [consumer, claim] of own) if (!consumers.has(consumer)) consumers.set(consumer, claim);
}

/**
 * Processes `folder` now and then every `intervalMs` until stop(), logging import errors and
 * what changed. A failing pass (a database hiccup) is logged and retried at the next interval.
 */
export async function keepDagFolderProcessed(database: Database, folder: string, intervalMs: number, log: Logger): Promise<{ stop(): void }> {
  let refusedBefore = '';
  const warnedUnreloadable = new Set<string>();
  const processOnce = async () => {
    try {
      const result = await processDagFolder(database, folder);
      for (const error of result.errors)
        log.error({ code: 'DF_DAG_IMPORT', fileloc: error.fileloc, error: error.message }, `DAG file ${error.fileloc}: ${error.message}`);
      for (const { fileloc, message } of result.unreloadable) {
        // Once per file and reason: it is true of every pass until the file changes.
        const key = `${fileloc}\u0000${message}`;
        if (warnedUnreloadable.has(key)) continue;
        warnedUnreloadable.add(key);
        log.warn(
          { fileloc, reason: message },
          `DAG file ${fileloc} is loaded with import() because ${message}: Node keeps every version of it until the process restarts, so each edit of it costs memory`,
        );
      }
      const changed = Object.entries(result.written).filter(([, write]) => write !== 'unchanged');
      if (changed.length > 0 || result.deleted.length > 0) {
        log.info(
          { written: Object.fromEntries(changed), deleted: result.deleted },
          `DAGs processed: ${changed.length} written, ${result.deleted.length} deleted`,
        );
      }
      refusedBefore = '';
    } catch (error) {
      const fields = errorFields(error, 'DF_DATABASE');
      // A refused folder stays refused until someone acts: said once, not every interval.
      if (fields.code === 'DF_DAG_FOLDER' && fields.error === refusedBefore) return;
      refusedBefore = fields.code === 'DF_DAG_FOLDER' ? fields.error : '';
      log.error(fields, `processing DAG folder ${folder} failed: ${fields.error}`);
    }
  };
  await processOnce();
  let running: Promise<void> | null = null;
  const timer = setInterval(() => {
    running ??= processOnce().finally(() => (running = null));
  }, intervalMs);
  return { stop: () => clearInterval(timer) };
}

/**
 * The scheduler's view of DAGs: the serialized rows, never DAG code. A DAG's JSON is read and
 * validated again only when its hash changed: a scheduler passes many times a second, and a
 * DAG of 1,000 tasks is a few hundred kilobytes of JSON.
 */
export function serializedDagSource(database: Database): DagSource {
  const context = { db: database.db, adapter: database.adapter, keyring: database.keyring };
  const parsed = new Map<string, SchedulerDag>();
  return async (dagId) => {
    const hash = await readSerializedDagHash(context, dagId);
    if (hash === null) {
      parsed.delete(dagId);
      return null;
    }
    const known = parsed.get(dagId);
    if (known?.hash === hash) return known;
    const row = await readSerializedDag(context, dagId);
    if (row === null) return null;
    const dag = toSchedulerDag(dagId, row.data, row.hash);
    parsed.set(dagId, dag);
    return dag;
  };
}

/** Refuses a DAG folder that does not exist or is not a folder (DF_INVALID_OPTION, naming it). */
export async function assertDagFolder(folder: string): Promise<void> {
  const absolute = path.resolve(folder);
  const found = await stat(absolute).catch(() => null);
  if (found === null)
    throw new InvalidOptionError('dags', `the DAG folder ${JSON.stringify(folder)} (${absolute}) does not exist; pass --dags or set DEFERFLOW_DAGS_FOLDER`);
  if (!found.isDirectory())
    throw new InvalidOptionError('dags', `${JSON.stringify(folder)} (${absolute}) is not a folder; --dags names the folder that holds the DAG files`);
}
