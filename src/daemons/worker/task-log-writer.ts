import pino, { type Logger } from 'pino';
import { describeThrown } from '../../vocabulary/errors.ts';
import type { TaskLogLine, Stores } from '../../storage/index.ts';
import { storableJson, storableText } from '../../vocabulary/serialization/storable-text.ts';
import { maskFields, SecretMasker } from '../../services/logs/secret-masker.ts';
import { isStoredLevel, LineBuffer, LogCap, parsePinoLine, storedLogLevel, TASK_LOG_BYTE_CAP, TASK_LOG_LINE_CAP } from '../../services/logs/log-buffer.ts';

export { TASK_LOG_BYTE_CAP, TASK_LOG_LEVEL, TASK_LOG_LINE_CAP } from '../../services/logs/log-buffer.ts';

/** What the worker binds to a try's logger: the task log's rows say it already. */
const BOUND_KEYS = new Set(['task_instance_id', 'dag_id', 'task_id', 'run_id', 'try_number']);

/** The loggers of one try: `task` for the task's code (capped), `worker` for the worker's own lines about it. */
export interface TryLoggers {
  readonly task: Logger;
  readonly worker: Logger;
  /** A line the task's code logged in its runner process (pino JSON text bound as `task` is): kept as `task`'s lines are. */
  taskText(text: string): void;
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
  readonly #buffer: LineBuffer<TaskLogLine>;
  /** What each open try ("id:try") has kept so far. */
  readonly #kept = new Map<string, LogCap>();
  /** One pino logger for every task's code and one for the worker's lines; each try logs through children. */
  readonly #taskLogger: Logger;
  readonly #workerLogger: Logger;

  constructor(
    storage: Pick<Stores, 'logs'>,
    private readonly processLog: Logger,
    /** Connection passwords and other known secrets, masked in every line. */
    private readonly masker: SecretMasker = SecretMasker.fromEnvironment(),
  ) {
    this.#buffer = new LineBuffer(
      (lines) => storage.logs.appendTaskLogLines(lines),
      (error, lines) =>
        processLog.error(
          { lines, error: describeThrown(error).error },
          `writing ${lines} task log line(s) failed; they are dropped (the worker's log has them)`,
        ),
    );
    // What a task log keeps does not depend on what the process prints (standalone prints warn
    // and up): lines are made down to info, or further when the process prints further.
    const level = storedLogLevel(processLog.level);
    this.#taskLogger = pino({ level, base: null }, { write: (text: string) => this.#route(text, true) });
    this.#workerLogger = pino({ level, base: null }, { write: (text: string) => this.#route(text, false) });
  }

  /** The loggers of one try, their lines bound to `bindings` (with task_instance_id and try_number). */
  open(bindings: { task_instance_id: number; try_number: number } & Record<string, string | number>): TryLoggers {
    // Counted in memory, so each run of a try has its own budget: a try resumed after a deferral
    // (perhaps on another host) starts afresh rather than reading its lines back first.
    this.#kept.set(`${bindings.task_instance_id}:${bindings.try_number}`, new LogCap());
    return { task: this.#taskLogger.child(bindings), worker: this.#workerLogger.child(bindings), taskText: (text) => this.#route(text, true) };
  }

  /** The try is over: later lines bound to it (from code still running) reach the worker's log only. */
  release(taskInstanceId: number, tryNumber: number): void {
    this.#kept.delete(`${taskInstanceId}:${tryNumber}`);
  }

  #route(text: string, underCap: boolean): void {
    const line = parsePinoLine(text);
    if (line === null) return;
    const { level, loggedAt } = line;
    const message = this.masker.mask(line.message);
    const fields = maskFields(this.masker, line.fields);
    // The process log filters by its own level.
    (this.processLog[level as 'info'] ?? this.processLog.info).call(this.processLog, fields, message);
    if (!isStoredLevel(line.levelValue)) return;
    const taskInstanceId = Number(fields.task_instance_id);
    const tryNumber = Number(fields.try_number);
    const kept = this.#kept.get(`${taskInstanceId}:${tryNumber}`);
    if (kept === undefined) return;
    const own = Object.fromEntries(Object.entries(fields).filter(([name]) => !BOUND_KEYS.has(name)));
    // One line PostgreSQL refuses would fail the whole batch, other tasks' lines included.
    const fieldsJson = Object.keys(own).length === 0 ? null : storableJson(own);
    if (underCap) {
      const admitted = kept.admit(Buffer.byteLength(message) + (fieldsJson === null ? 0 : Buffer.byteLength(fieldsJson)));
      if (admitted === false) return;
      if (admitted === 'capped') {
        const why = `task log cap reached (${TASK_LOG_LINE_CAP} lines or ${TASK_LOG_BYTE_CAP} bytes a try): what the task logs from here on is in the worker's log only`;
        this.#buffer.keep({ taskInstanceId, tryNumber, loggedAt, level: 'warn', message: why, fieldsJson: null });
        return;
      }
    }
    this.#buffer.keep({ taskInstanceId, tryNumber, loggedAt, level, message: storableText(message), fieldsJson });
  }

  /** Writes every line logged so far; resolves once they are in the database (or dropped on error). */
  flush(): Promise<void> {
    return this.#buffer.flush();
  }

  /** Stops the timer and writes what is left. */
  close(): Promise<void> {
    return this.#buffer.close();
  }
}
