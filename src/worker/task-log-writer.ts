import pino, { type Logger } from 'pino';
import { describeThrown } from '../errors.ts';
import type { Storage, TaskLogLine } from '../storage/index.ts';
import { storableJson, storableText } from '../serialization/storable-text.ts';

/** Most lines a task's own code keeps in one run of a try's task log; later ones reach the worker's log only. */
export const TASK_LOG_LINE_CAP = 10_000;
/** Most bytes (message and fields, UTF-8) a task's own code keeps in one run of a try's task log. */
export const TASK_LOG_BYTE_CAP = 4 * 1024 * 1024;
/** The least severe level a task log keeps, whatever the process prints (Airflow's task logs: INFO). */
export const TASK_LOG_LEVEL = 'info';
/** How long a line may wait before it is written (a finished task's lines are written at once). */
const FLUSH_INTERVAL_MS = 1_000;
/** Fields every pino line has, kept in their own columns or not at all. */
const LINE_KEYS = new Set(['time', 'level', 'msg']);
/** What the worker binds to a try's logger: the task log's rows say it already. */
const BOUND_KEYS = new Set(['task_instance_id', 'dag_id', 'task_id', 'run_id', 'try_number']);

/** The loggers of one try: `task` for the task's code (capped), `worker` for the worker's own lines about it. */
export interface TryLoggers {
  readonly task: Logger;
  readonly worker: Logger;
}

interface KeptSoFar {
  lines: number;
  bytes: number;
  capped: boolean;
}

/**
 * Task logs: each try of a task instance gets loggers (`open`, then `release` when the try is
 * over) whose lines are kept in the task_log table, for `deferflow tasks logs` on any host, and
 * also go to the worker's own log. Lines are buffered and written many per statement, on a timer
 * and whenever the worker is about to record an outcome (`flush`), so a finished task's log is
 * complete when its state says so. A failed write is reported in the worker's log and dropped:
 * logging never fails a task.
 *
 * What the task's code logs is capped per run of a try (TASK_LOG_LINE_CAP, TASK_LOG_BYTE_CAP),
 * with one line saying so; the worker's own lines (a few per run of the task) are not, so the outcome and
 * its error still end the log of a task that flooded it.
 */
export class TaskLogWriter {
  #pending: TaskLogLine[] = [];
  #writing: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | null = null;
  /** What each open try ("id:try") has kept so far. */
  readonly #kept = new Map<string, KeptSoFar>();
  /** One pino logger for every task's code and one for the worker's lines; each try logs through children. */
  readonly #taskLogger: Logger;
  readonly #workerLogger: Logger;

  constructor(
    private readonly storage: Storage,
    private readonly processLog: Logger,
  ) {
    // What a task log keeps does not depend on what the process prints (standalone prints warn
    // and up): lines are made down to info, or further when the process prints further.
    const level = pino.levels.values[processLog.level]! < pino.levels.values[TASK_LOG_LEVEL]! ? processLog.level : TASK_LOG_LEVEL;
    this.#taskLogger = pino({ level, base: null }, { write: (text: string) => this.#route(text, true) });
    this.#workerLogger = pino({ level, base: null }, { write: (text: string) => this.#route(text, false) });
  }

  /** The loggers of one try, their lines bound to `bindings` (with task_instance_id and try_number). */
  open(bindings: { task_instance_id: number; try_number: number } & Record<string, string | number>): TryLoggers {
    // Counted in memory, so each run of a try has its own budget: a try resumed after a deferral
    // (perhaps on another host) starts afresh rather than reading its lines back first.
    this.#kept.set(`${bindings.task_instance_id}:${bindings.try_number}`, { lines: 0, bytes: 0, capped: false });
    return { task: this.#taskLogger.child(bindings), worker: this.#workerLogger.child(bindings) };
  }

  /** The try is over: later lines bound to it (from code still running) reach the worker's log only. */
  release(taskInstanceId: number, tryNumber: number): void {
    this.#kept.delete(`${taskInstanceId}:${tryNumber}`);
  }

  #route(text: string, underCap: boolean): void {
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const level = pino.levels.labels[Number(line.level)] ?? 'info';
    const message = typeof line.msg === 'string' ? line.msg : '';
    const fields = Object.fromEntries(Object.entries(line).filter(([key]) => !LINE_KEYS.has(key)));
    // The process log filters by its own level.
    (this.processLog[level as 'info'] ?? this.processLog.info).call(this.processLog, fields, message);
    if (Number(line.level) < pino.levels.values[TASK_LOG_LEVEL]!) return;
    const taskInstanceId = Number(line.task_instance_id);
    const tryNumber = Number(line.try_number);
    const kept = this.#kept.get(`${taskInstanceId}:${tryNumber}`);
    if (kept === undefined) return;
    const own = Object.fromEntries(Object.entries(fields).filter(([name]) => !BOUND_KEYS.has(name)));
    // One line PostgreSQL refuses would fail the whole batch, other tasks' lines included.
    const fieldsJson = Object.keys(own).length === 0 ? null : storableJson(own);
    const loggedAt = typeof line.time === 'number' ? line.time : Date.now();
    if (underCap) {
      if (kept.capped) return;
      const bytes = Buffer.byteLength(message) + (fieldsJson === null ? 0 : Buffer.byteLength(fieldsJson));
      if (kept.lines >= TASK_LOG_LINE_CAP || kept.bytes + bytes > TASK_LOG_BYTE_CAP) {
        kept.capped = true;
        const why = `task log cap reached (${TASK_LOG_LINE_CAP} lines or ${TASK_LOG_BYTE_CAP} bytes a try): what the task logs from here on is in the worker's log only`;
        this.#keep({ taskInstanceId, tryNumber, loggedAt, level: 'warn', message: why, fieldsJson: null });
        return;
      }
      kept.lines += 1;
      kept.bytes += bytes;
    }
    this.#keep({ taskInstanceId, tryNumber, loggedAt, level, message: storableText(message), fieldsJson });
  }

  #keep(line: TaskLogLine): void {
    this.#pending.push(line);
    this.#writeSoon();
  }

  /** Writes every line logged so far; resolves once they are in the database (or dropped on error). */
  flush(): Promise<void> {
    this.#writing = this.#writing.then(() => this.#writePending());
    return this.#writing;
  }

  /** Stops the timer and writes what is left. */
  async close(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.flush();
  }

  #writeSoon(): void {
    if (this.#timer) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, FLUSH_INTERVAL_MS);
    this.#timer.unref();
  }

  async #writePending(): Promise<void> {
    const lines = this.#pending.splice(0);
    if (lines.length === 0) return;
    try {
      await this.storage.appendTaskLogLines(lines);
    } catch (error) {
      this.processLog.error(
        { lines: lines.length, error: describeThrown(error).error },
        `writing ${lines.length} task log line(s) failed; they are dropped (the worker's log has them)`,
      );
    }
  }
}
