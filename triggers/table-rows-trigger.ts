import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent, WatchEvents } from '../src/authoring/triggers/trigger-event.ts';
import { matches } from '../src/authoring/triggers/signal-trigger.ts';
import { connectionDialect, nextNotification, queryRows } from '../src/authoring/connections/sql-connection.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import type { JsonObject, JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkBatch, checkConnectionName, checkKwargFields } from './kwarg-checks.ts';
import { describeValue } from './date-time-trigger.ts';
import { jsonCell } from './sql-trigger.ts';

export interface TableRowsTriggerKwargs {
  /** A named connection (DEFERFLOW_CONN_<NAME>): a sqlite: or postgres:// URL. Its URL is never stored. */
  readonly connection: string;
  /** The table (or `schema.table`). */
  readonly table: string;
  /** A column whose values only grow as rows are added (a serial id, say): rows are read past the last one seen. */
  readonly cursorColumn: string;
  /** The columns an event carries. @default every column */
  readonly columns?: readonly string[];
  /** Only rows holding every field given here fire (a subset match on the row, as SignalTrigger's `match`). */
  readonly match?: JsonValue;
  /** Rows with a cursor value above this one are read (a watcher: until it has a cursor of its own). @default null: the whole table */
  readonly after?: JsonValue;
  /** Rows read at once, and handed over in one batch by a watcher. @default 100 */
  readonly batch?: number;
  /** Seconds between reads when there is no new row. @default 5 */
  readonly pollInterval?: number;
  /**
   * A PostgreSQL channel whose NOTIFY wakes the trigger to read at once, rather than at its next
   * poll (a trigger on your table runs `pg_notify`: see docs/events.md). One listening connection
   * per connection and channel serves every trigger in a triggerer; the poll goes on as a safety
   * net. Ignored on SQLite, which has no NOTIFY. @default none: polls only
   */
  readonly notify?: string;
}

/** What a row event carries: its table and the row (JSON: bigints and dates as text). */
export interface TableRowEvent extends JsonObject {
  readonly table: string;
  readonly row: JsonObject;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

/**
 * New rows of a table of yours, on a named SQL connection (SQLite or PostgreSQL), read in the
 * order of `cursorColumn` past the last value seen. As a wait it fires with the first row
 * (past `after`) that matches `match`: `{ table, row }`. As a watcher (a DAG scheduled on it) it
 * hands over each batch of matching rows (key `<table>:<cursor value>`), its cursor the last value
 * read, so that after a crash a triggerer reads on exactly after the rows whose runs were committed.
 * `cursorColumn` must only grow: a row added later with a value not above one already read is
 * never seen (a serial or identity column is).
 */
export class TableRowsTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.TableRowsTrigger';
  readonly connection: string;
  readonly table: string;
  readonly cursorColumn: string;
  readonly columns: readonly string[] | null;
  readonly match: JsonValue | undefined;
  readonly after: JsonValue;
  readonly batch: number;
  readonly pollInterval: number;
  readonly notify: string | undefined;

  constructor(kwargs: TableRowsTriggerKwargs) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError('TableRowsTrigger', why);
    checkKwargFields(
      kwargs,
      '{ connection, table, cursorColumn, … }',
      ['connection', 'table', 'cursorColumn', 'columns', 'match', 'after', 'batch', 'pollInterval', 'notify'],
      invalid,
    );
    const { connection, table, cursorColumn, columns, match, after = null, batch = 100, pollInterval = 5, notify } = kwargs;
    checkConnectionName(connection, invalid);
    if (typeof table !== 'string' || !IDENTIFIER.test(table))
      throw invalid(`table ${describeValue(table)} is not a table name (letters, digits, "_", or schema.table)`);
    if (typeof cursorColumn !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(cursorColumn))
      throw invalid(`cursorColumn ${describeValue(cursorColumn)} is not a column name`);
    if (
      columns !== undefined &&
      (!Array.isArray(columns) || columns.length === 0 || !columns.every((column) => typeof column === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(column)))
    )
      throw invalid(`columns ${describeValue(columns)} is not a list of column names`);
    checkBatch(batch, invalid);
    if (typeof pollInterval !== 'number' || !(pollInterval > 0))
      throw invalid(`pollInterval ${describeValue(pollInterval)} is not a number of seconds above 0`);
    if (notify !== undefined && (typeof notify !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(notify)))
      throw invalid(`notify ${describeValue(notify)} is not a channel name (letters, digits and "_", at most 63)`);
    this.connection = connection;
    this.table = table;
    this.cursorColumn = cursorColumn;
    this.columns = columns === undefined ? null : [...columns];
    this.match = match;
    this.after = after;
    this.batch = batch;
    this.pollInterval = pollInterval;
    this.notify = notify;
  }

  override serialize(): SerializedTrigger {
    return {
      classpath: TableRowsTrigger.classpath,
      kwargs: {
        connection: this.connection,
        table: this.table,
        cursorColumn: this.cursorColumn,
        ...(this.columns === null ? {} : { columns: [...this.columns] }),
        ...(this.match === undefined ? {} : { match: this.match }),
        after: this.after,
        batch: this.batch,
        pollInterval: this.pollInterval,
        ...(this.notify === undefined ? {} : { notify: this.notify }),
      },
    };
  }

  override describeWait(): string {
    return `rows of ${this.table}${this.match === undefined ? '' : ` matching ${JSON.stringify(this.match)}`}`;
  }

  async *run(): AsyncGenerator<TriggerEvent | WatchEvents> {
    let after: JsonValue = this.watching && this.cursor !== null ? this.cursor : this.after;
    // The next NOTIFY, listened for before a read (a row added while it runs wakes the pause after
    // it at once) and kept across reads until it comes.
    let notice: { readonly came: Promise<void>; arrived: boolean } | null = null;
    for (;;) {
      if (this.notify !== undefined && (notice === null || notice.arrived)) {
        const next: { came: Promise<void>; arrived: boolean } = { came: nextNotification(this.connection, this.notify, this.signal), arrived: false };
        void next.came.then(() => {
          next.arrived = true;
        });
        notice = next;
      }
      const rows = await this.#read(after);
      if (rows.length === 0) {
        await this.#pause(notice?.came ?? null);
        continue;
      }
      const events = rows.map((row) => ({ table: this.table, row }));
      const last = rows.at(-1)![this.cursorColumn] ?? null;
      if (!this.watching) {
        const found = events.find((event) => this.#matches(event));
        if (found) {
          yield new TriggerEvent(found);
          return;
        }
        after = last;
        continue;
      }
      yield new WatchEvents(
        events.filter((event) => this.#matches(event)).map((event) => ({ key: `${this.table}:${String(event.row[this.cursorColumn])}`, payload: event })),
        last,
      );
      after = last;
    }
  }

  /** Until the next poll, or sooner a NOTIFY on `notify`. */
  async #pause(notified: Promise<void> | null): Promise<void> {
    const poll = this.sleep(this.pollInterval * 1000);
    if (notified === null) return poll;
    // The sleep left running when a notification wins is cancelled with the trigger: its rejection is nobody's.
    poll.catch(() => {});
    await Promise.race([poll, notified]);
  }

  #matches(event: TableRowEvent): boolean {
    return this.match === undefined || matches(event.row, this.match);
  }

  /** The next `batch` rows past `after`, in cursor order, as JSON. */
  async #read(after: JsonValue): Promise<JsonObject[]> {
    const dialect = connectionDialect(this.connection);
    const quote = (name: string) =>
      name
        .split('.')
        .map((part) => `"${part}"`)
        .join('.');
    const placeholder = (n: number) => (dialect === 'postgres' ? `$${n}` : '?');
    const columns = this.columns === null ? '*' : this.columns.map(quote).join(', ');
    const cursor = quote(this.cursorColumn);
    const where = after === null ? '' : ` where ${cursor} > ${placeholder(1)}`;
    const sql = `select ${columns} from ${quote(this.table)}${where} order by ${cursor} limit ${placeholder(after === null ? 1 : 2)}`;
    const rows = await queryRows(this.connection, sql, after === null ? [this.batch] : [after, this.batch]);
    return rows.map((row) => Object.fromEntries(Object.entries(row).map(([column, value]) => [column, jsonCell(value)])));
  }
}
