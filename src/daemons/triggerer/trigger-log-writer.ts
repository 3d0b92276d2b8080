import pino, { type Logger } from 'pino';
import { describeThrown } from '../../vocabulary/errors.ts';
import { isStoredLevel, LineBuffer, LogCap, parsePinoLine, storedLogLevel, TASK_LOG_BYTE_CAP, TASK_LOG_LINE_CAP } from '../../services/logs/log-buffer.ts';
import { maskFields, SecretMasker } from '../../services/logs/secret-masker.ts';
import { storableJson, storableText } from '../../vocabulary/serialization/storable-text.ts';
import type { TriggerLogLine, Stores } from '../../storage/index.ts';

/** What a trigger's logger binds: the stored line's trigger_id column says it already. */
const BOUND_KEYS = new Set(['trigger_id', 'classpath']);

/**
 * Trigger logs: what a trigger logs through `this.log` goes to the triggerer's own log and is
 * stored once in trigger_log under the trigger's id, so `deferflow tasks logs` shows it for every
 * task instance waiting on the trigger, while it waits and after, from any host (Airflow shows
 * no trigger lines while a task is deferred: apache/airflow#44683). Written every second, many
 * lines per statement; capped per trigger run as task logs are (TASK_LOG_LINE_CAP,
 * TASK_LOG_BYTE_CAP). Connection passwords and the trigger's secret kwargs are masked before a
 * line goes anywhere.
 *
 * Per trigger it keeps nothing until the trigger logs: then a pino child and a cap count.
 */
export class TriggerLogWriter {
  readonly #buffer: LineBuffer<TriggerLogLine>;
  readonly #logger: Logger;
  /** What each trigger that logged has kept so far; forgotten with the trigger. */
  readonly #kept = new Map<number, LogCap>();
  /** Maskers of triggers with secret kwargs that logged. */
  readonly #maskers = new Map<number, SecretMasker>();

  constructor(
    storage: Pick<Stores, 'logs'>,
    private readonly processLog: Logger,
    /** Connection passwords: masked in every trigger's lines. */
    readonly masker: SecretMasker = SecretMasker.fromEnvironment(),
  ) {
    this.#buffer = new LineBuffer(
      (lines) => storage.logs.appendTriggerLogLines(lines),
      (error, lines) =>
        processLog.error(
          { lines, error: describeThrown(error).error },
          `writing ${lines} trigger log line(s) failed; they are dropped (the triggerer's log has them)`,
        ),
    );
    this.#logger = pino({ level: storedLogLevel(processLog.level), base: null }, { write: (text: string) => this.#route(text) });
  }

  /** The logger of one trigger; `secrets`: the values of its secret kwargs, masked in its lines. */
  logger(triggerId: number, classpath: string, secrets: readonly string[]): Logger {
    this.#kept.set(triggerId, new LogCap());
    if (secrets.length > 0) this.#maskers.set(triggerId, this.masker.with(secrets));
    return this.#logger.child({ trigger_id: triggerId, classpath });
  }

  /** The trigger is gone from this triggerer: later lines (from code still running) reach the triggerer's log only. */
  forget(triggerId: number): void {
    this.#kept.delete(triggerId);
    this.#maskers.delete(triggerId);
  }

  #route(text: string): void {
    const line = parsePinoLine(text);
    if (line === null) return;
    const triggerId = Number(line.fields.trigger_id);
    const masker = this.#maskers.get(triggerId) ?? this.masker;
    const message = masker.mask(line.message);
    const fields = maskFields(masker, line.fields);
    (this.processLog[line.level as 'info'] ?? this.processLog.info).call(this.processLog, fields, message);
    if (!isStoredLevel(line.levelValue)) return;
    const kept = this.#kept.get(triggerId);
    if (kept === undefined) return;
    const own = Object.fromEntries(Object.entries(fields).filter(([name]) => !BOUND_KEYS.has(name)));
    const fieldsJson = Object.keys(own).length === 0 ? null : storableJson(own);
    const admitted = kept.admit(Buffer.byteLength(message) + (fieldsJson === null ? 0 : Buffer.byteLength(fieldsJson)));
    if (admitted === false) return;
    if (admitted === 'capped') {
      const why = `trigger log cap reached (${TASK_LOG_LINE_CAP} lines or ${TASK_LOG_BYTE_CAP} bytes): what the trigger logs from here on is in the triggerer's log only`;
      this.#buffer.keep({ triggerId, loggedAt: line.loggedAt, level: 'warn', message: why, fieldsJson: null });
      return;
    }
    this.#buffer.keep({ triggerId, loggedAt: line.loggedAt, level: line.level, message: storableText(message), fieldsJson });
  }

  flush(): Promise<void> {
    return this.#buffer.flush();
  }

  close(): Promise<void> {
    return this.#buffer.close();
  }
}
