import pino, { type Logger } from 'pino';
import { describeThrown } from '../errors.ts';
import type { Storage, TaskLogLine } from '../storage/index.ts';

/** Most lines one try of a task instance keeps in its task log; later ones reach the worker's log only. */
export const TASK_LOG_LINE_CAP = 10_000;
/** How long a line may wait before it is written (a finished task's lines are written at once). */
const FLUSH_INTERVAL_MS = 1_000;
/** Fields every pino line has, kept in their own columns or not at all. */
const LINE_KEYS = new Set(['time', 'level', 'msg']);
/** What the worker binds to a try's logger: the task log's rows say it already. */
const BOUND_KEYS = new Set(['task_instance_id', 'dag_id', 'task_id', 'run_id', 'try_number']);

/**
 * Task logs: each try of a task instance gets a logger (`open`, then `release` when the try is
 * over) whose lines are kept in the
 * task_log table, for `deferflow tasks logs` on any host, and also go to the worker's own log.
 * Lines are buffered and written many per statement, on a timer and whenever the worker is
 * about to record an outcome (`flush`), so a finished task's log is complete when its state
 * says so. A failed write is reported in the worker's log and dropped: logging never fails a
 * task.
 */
export class TaskLogWriter {
  #pending: TaskLogLine[] = [];
  #writing: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | null = null;
  /** Lines kept so far per open try ("id:try"). */
  readonly #kept = new Map<string, number>();
  /** One pino logger for every task; each try logs through a child bound to it. */
  readonly #logger: Logger;

  constructor(
    private readonly storage: Storage,
    private readonly processLog: Logger,
  ) {
    this.#logger = pino({ level: processLog.level, base: null }, { write: (text: string) => this.#route(text) });
  }

  /** A logger for one try, its lines bound to `bindings` (with task_instance_id and try_number). */
  open(bindings: { task_instance_id: number; try_number: number } & Record<string, string | number>): Logger {
    this.#kept.set(`${bindings.task_instance_id}:${bindings.try_number}`, 0);
    return this.#logger.child(bindings);
  }

  /** The try is over: later lines bound to it (from code still running) reach the worker's log only. */
  release(taskInstanceId: number, tryNumber: number): void {
    this.#kept.delete(`${taskInstanceId}:${tryNumber}`);
  }

  #route(text: string): void {
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const level = pino.levels.labels[Number(line.level)] ?? 'info';
    const message = typeof line.msg === 'string' ? line.msg : '';
    const fields = Object.fromEntries(Object.entries(line).filter(([key]) => !LINE_KEYS.has(key)));
    (this.processLog[level as 'info'] ?? this.processLog.info).call(this.processLog, fields, message);
    const taskInstanceId = Number(line.task_instance_id);
    const tryNumber = Number(line.try_number);
    const key = `${taskInstanceId}:${tryNumber}`;
    const kept = this.#kept.get(key);
    if (kept === undefined || kept > TASK_LOG_LINE_CAP) return;
    this.#kept.set(key, kept + 1);
    const capped = kept + 1 > TASK_LOG_LINE_CAP;
    const own = Object.fromEntries(Object.entries(fields).filter(([name]) => !BOUND_KEYS.has(name)));
    this.#pending.push({
      taskInstanceId,
      tryNumber,
      loggedAt: typeof line.time === 'number' ? line.time : Date.now(),
      level: capped ? 'warn' : level,
      message: capped ? `task log cap of ${TASK_LOG_LINE_CAP} lines reached: later lines of this try are in the worker's log only` : message,
      fieldsJson: capped || Object.keys(own).length === 0 ? null : JSON.stringify(own),
    });
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
      this.processLog.error({ lines: lines.length, error: describeThrown(error).error }, `writing ${lines.length} task log line(s) failed; they are dropped (the worker's log has them)`);
    }
  }
}
