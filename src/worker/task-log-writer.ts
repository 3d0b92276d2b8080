import pino, { type Logger } from 'pino';
import { describeThrown } from '../errors.ts';
import type { Storage, TaskLogLine } from '../storage/index.ts';

/** Most lines one try of a task instance keeps in its task log; later ones reach the worker's log only. */
export const TASK_LOG_LINE_CAP = 10_000;
/** How long a line may wait before it is written (a finished task's lines are written at once). */
const FLUSH_INTERVAL_MS = 1_000;
/** Fields every pino line has, kept in their own columns or not at all. */
const LINE_KEYS = new Set(['time', 'level', 'msg']);

/**
 * Task logs: each try of a task instance gets a logger (`open`) whose lines are kept in the
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

  constructor(
    private readonly storage: Storage,
    private readonly processLog: Logger,
  ) {}

  /** A logger for one try, its lines bound to `bindings` (dag_id, task_id, ...). */
  open(taskInstanceId: number, tryNumber: number, bindings: Record<string, string | number>): Logger {
    const forward = this.processLog.child(bindings);
    let kept = 0;
    const destination = {
      write: (text: string) => {
        let line: Record<string, unknown>;
        try {
          line = JSON.parse(text) as Record<string, unknown>;
        } catch {
          return;
        }
        const level = pino.levels.labels[Number(line.level)] ?? 'info';
        const message = typeof line.msg === 'string' ? line.msg : '';
        const fields = Object.fromEntries(Object.entries(line).filter(([key]) => !LINE_KEYS.has(key) && !(key in bindings)));
        (forward[level as 'info'] ?? forward.info).call(forward, fields, message);
        if (kept > TASK_LOG_LINE_CAP) return;
        kept++;
        const capped = kept > TASK_LOG_LINE_CAP;
        this.#pending.push({
          taskInstanceId,
          tryNumber,
          loggedAt: typeof line.time === 'number' ? line.time : Date.now(),
          level: capped ? 'warn' : level,
          message: capped ? `task log cap of ${TASK_LOG_LINE_CAP} lines reached: later lines of this try are in the worker's log only` : message,
          fieldsJson: capped || Object.keys(fields).length === 0 ? null : JSON.stringify(fields),
        });
        this.#writeSoon();
      },
    };
    return pino({ level: this.processLog.level, base: bindings }, destination);
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
