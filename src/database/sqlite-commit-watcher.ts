import { realpathSync, watch, type FSWatcher } from 'node:fs';

/**
 * Tells a process when another process committed to the SQLite file it uses: the SQLite
 * counterpart of a NOTIFY, without a payload. Daemons sharing one file (a worker, a scheduler
 * and a triggerer started apart, or a CLI command writing to a running standalone) would
 * otherwise find each other's work only at their next poll (1 s by default, one poll per hop).
 *
 * Every commit in WAL mode appends to `<file>-wal`, so the watcher listens for changes to that
 * file (inotify on Linux: no cost while nothing is written) and then reads the connection's
 * commit counter (SQLite's data_version), which moves only for commits by other connections:
 * this process's own writes wake nobody. A change wakes at most once per MIN_GAP_MS, so a
 * process writing without pause elsewhere cannot turn every pass into a stream of them.
 *
 * A hint only, like NOTIFY: where the file system reports no changes (some network file
 * systems), the daemons still poll and lose nothing but the time.
 */
export class SqliteCommitWatcher {
  readonly #file: string;
  readonly #readVersion: () => Promise<number | null>;
  readonly #onCommit: () => void;
  readonly #onWatchFailed: (error: unknown) => void;
  #watcher: FSWatcher | null = null;
  #version: number | null = null;
  #checkTimer: NodeJS.Timeout | null = null;
  #checking = false;
  #changedWhileChecking = false;
  #lastWokeAt = Number.NEGATIVE_INFINITY;
  #closed = false;

  constructor(options: {
    /** The database file (not :memory:); its write-ahead log is `<file>-wal`. */
    readonly file: string;
    /** The connection's commit counter (PRAGMA data_version); null if it cannot be read now. */
    readonly readVersion: () => Promise<number | null>;
    /** Called when another connection committed since the last call. */
    readonly onCommit: () => void;
    /** Called once if the file cannot be watched (polling then carries on alone). */
    readonly onWatchFailed: (error: unknown) => void;
  }) {
    this.#file = options.file;
    this.#readVersion = options.readVersion;
    this.#onCommit = options.onCommit;
    this.#onWatchFailed = options.onWatchFailed;
  }

  /**
   * Starts watching, then reads the counter: a commit from the moment this is called is reported
   * (one that lands between the two is reported too, at worst once too often).
   */
  async start(): Promise<void> {
    if (this.#watcher || this.#closed) return;
    try {
      // The log exists while this process has the database open in WAL mode (SQLite removes it
      // only when the last connection closes), so its inode stays the one watched. SQLite puts
      // it beside the file a symbolic link points to.
      this.#watcher = watch(`${realpathSync(this.#file)}-wal`, { persistent: false }, () => this.#changed());
      this.#watcher.on('error', (error) => this.#failed(error));
    } catch (error) {
      this.#failed(error);
      return;
    }
    const version = await this.#readVersion().catch(() => null);
    this.#version ??= version;
  }

  close(): void {
    this.#closed = true;
    this.#watcher?.close();
    this.#watcher = null;
    if (this.#checkTimer) clearTimeout(this.#checkTimer);
    this.#checkTimer = null;
  }

  #failed(error: unknown): void {
    if (this.#closed) return;
    this.close();
    this.#onWatchFailed(error);
  }

  /** A commit writes several pages, each a change event: they are read as one, COALESCE_MS later. */
  #changed(): void {
    if (this.#closed) return;
    if (this.#checking) {
      this.#changedWhileChecking = true;
      return;
    }
    if (this.#checkTimer) return;
    const wait = Math.max(COALESCE_MS, this.#lastWokeAt + MIN_GAP_MS - performance.now());
    this.#checkTimer = setTimeout(() => void this.#check(), wait);
    this.#checkTimer.unref();
  }

  async #check(): Promise<void> {
    this.#checkTimer = null;
    this.#checking = true;
    this.#changedWhileChecking = false;
    let version: number | null = null;
    try {
      version = await this.#readVersion();
    } catch {
      // The database is busy or gone for now: the next change, or the daemons' polls, find it.
    }
    this.#checking = false;
    if (this.#closed) return;
    if (version !== null && version !== this.#version) {
      this.#version = version;
      this.#lastWokeAt = performance.now();
      this.#onCommit();
    }
    if (this.#changedWhileChecking) this.#changed();
  }
}

/** How long after a change the counter is read: the rest of that commit's writes land meanwhile. */
const COALESCE_MS = 5;
/** The least time between two wake-ups, as daemons pace the passes pushes start (WOKEN_PASS_PACING's gap). */
const MIN_GAP_MS = 50;
