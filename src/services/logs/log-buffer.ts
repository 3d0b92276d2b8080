import pino from 'pino';

/** Most lines user code (a task's, a trigger's) keeps in one log: a run of a try, or a trigger's run. Later ones reach the process's log only. */
export const TASK_LOG_LINE_CAP = 10_000;
/** Most bytes (message and fields, UTF-8) user code keeps in one log. */
export const TASK_LOG_BYTE_CAP = 4 * 1024 * 1024;
/** The least severe level a stored log keeps, whatever the process prints (Airflow's task logs: INFO). */
export const TASK_LOG_LEVEL = 'info';
/** How long a line may wait before it is written. */
const FLUSH_INTERVAL_MS = 1_000;
/** Fields every pino line has, kept in their own columns or not at all. */
const LINE_KEYS = new Set(['time', 'level', 'msg']);

/** A pino JSON line, taken apart. */
export interface ParsedLine {
  readonly level: string;
  readonly levelValue: number;
  readonly message: string;
  /** Every field but time, level and msg. */
  readonly fields: Record<string, unknown>;
  readonly loggedAt: number;
}

export function parsePinoLine(text: string): ParsedLine | null {
  let line: Record<string, unknown>;
  try {
    line = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return null;
  }
  const levelValue = Number(line.level);
  return {
    level: pino.levels.labels[levelValue] ?? 'info',
    levelValue,
    message: typeof line.msg === 'string' ? line.msg : '',
    fields: Object.fromEntries(Object.entries(line).filter(([key]) => !LINE_KEYS.has(key))),
    loggedAt: typeof line.time === 'number' ? line.time : Date.now(),
  };
}

/** The level stored logs are made down to: TASK_LOG_LEVEL, or further when the process prints further. */
export function storedLogLevel(processLevel: string): string {
  return pino.levels.values[processLevel]! < pino.levels.values[TASK_LOG_LEVEL]! ? processLevel : TASK_LOG_LEVEL;
}

export function isStoredLevel(levelValue: number): boolean {
  return levelValue >= pino.levels.values[TASK_LOG_LEVEL]!;
}

/**
 * What one log has kept against the caps. `admit` says whether a line of `bytes` is kept: yes
 * while under both caps; 'capped' once, for the line that crosses one (the log then says so);
 * no after that.
 */
export class LogCap {
  #lines = 0;
  #bytes = 0;
  #capped = false;

  admit(bytes: number): boolean | 'capped' {
    if (this.#capped) return false;
    if (this.#lines >= TASK_LOG_LINE_CAP || this.#bytes + bytes > TASK_LOG_BYTE_CAP) {
      this.#capped = true;
      return 'capped';
    }
    this.#lines += 1;
    this.#bytes += bytes;
    return true;
  }
}

/**
 * Lines waiting to be stored: written many per statement, on a timer (FLUSH_INTERVAL_MS) and
 * whenever the owner asks (`flush`). A failed write is reported through `onError` and its lines
 * dropped: logging never fails the work it describes.
 */
export class LineBuffer<Line> {
  #pending: Line[] = [];
  #writing: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly write: (lines: Line[]) => Promise<void>,
    private readonly onError: (error: unknown, lines: number) => void,
  ) {}

  keep(line: Line): void {
    this.#pending.push(line);
    if (this.#timer) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, FLUSH_INTERVAL_MS);
    this.#timer.unref();
  }

  /** Writes every line kept so far; resolves once they are stored (or dropped on error). */
  flush(): Promise<void> {
    this.#writing = this.#writing.then(async () => {
      const lines = this.#pending.splice(0);
      if (lines.length === 0) return;
      try {
        await this.write(lines);
      } catch (error) {
        this.onError(error, lines.length);
      }
    });
    return this.#writing;
  }

  /** Stops the timer and writes what is left. */
  async close(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.flush();
  }
}
