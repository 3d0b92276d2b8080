import { createRequire } from 'node:module';
import type { Logger } from 'pino';
import type { DialectAdapter } from '../../database/dialect.ts';
import { parseDatabaseUrl } from '../../database/database-url.ts';
import { recordCulpritStatement } from '../../storage/quarantine-triggers.ts';
import { installService, type HelperService } from '../../vocabulary/helper-thread.ts';

/** How often the main thread records that its loop turned. */
const TICK_MS = 250;

export interface WatchdogOptions {
  /** How long the event loop may be held before the process is restarted. */
  readonly limitMs: number;
  /** Culprit count at which a trigger is quarantined. */
  readonly quarantineAfter: number;
}

/**
 * The triggerer's watchdog. A trigger step that never yields the event loop (a synchronous
 * infinite loop, a catastrophic regex) freezes every other trigger on the triggerer, and no code
 * on that loop can notice. So a service on the process's helper thread watches (a thread of its
 * own would cost ~10 MB; see threads/helper-thread.ts): the main thread records, every
 * TICK_MS, that its loop turned, and the runner records which trigger's step is running (one
 * Atomics store per step). When the loop has not turned for the limit while a trigger's step
 * runs, the thread records that trigger as the culprit in the database (counted, handed back
 * unowned, quarantined at the limit), writes one log line, and kills the process with SIGKILL
 * (code that is no trigger's step, a task's in standalone, is only warned about): a step cannot be aborted
 * safely from outside, so the process is restarted by its supervisor (systemd, Kubernetes,
 * compose's restart policy). Its other triggers go to peers, or to it again once restarted,
 * after the health-check threshold, as after any crash.
 */
export class Watchdog {
  readonly #state = new BigInt64Array(new SharedArrayBuffer(16));
  #service: HelperService | null = null;
  #ticker: NodeJS.Timeout | null = null;

  constructor(
    private readonly options: WatchdogOptions,
    private readonly databaseUrl: string,
    private readonly adapter: DialectAdapter,
    private readonly log: Logger,
  ) {}

  start(): void {
    const target = parseDatabaseUrl(this.databaseUrl);
    const require = createRequire(import.meta.url);
    Atomics.store(this.#state, 0, BigInt(Date.now()));
    this.#ticker = setInterval(() => Atomics.store(this.#state, 0, BigInt(Date.now())), TICK_MS);
    this.#ticker.unref();
    this.#service = installService({
      source: WATCHDOG_SERVICE_SOURCE,
      data: {
        limitMs: this.options.limitMs,
        quarantineAfter: this.options.quarantineAfter,
        checkMs: Math.min(TICK_MS, Math.max(10, Math.floor(this.options.limitMs / 4))),
        shared: this.#state.buffer,
        target: target.dialect === 'sqlite' ? { dialect: 'sqlite', file: target.file } : { dialect: 'postgres', url: target.url },
        driverPath: require.resolve(target.dialect === 'sqlite' ? 'better-sqlite3' : 'pg'),
        statement: recordCulpritStatement(this.adapter),
      },
      onLost: (reason) => this.log.error({ error: reason }, `the watchdog stopped: ${reason}; the event loop is not watched`),
    });
    this.log.debug({ limit_ms: this.options.limitMs, quarantine_after: this.options.quarantineAfter }, 'watchdog started');
  }

  /** The trigger whose step runs now (0: none). */
  stepping(triggerId: number): void {
    Atomics.store(this.#state, 1, BigInt(triggerId));
  }

  async stop(): Promise<void> {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
    const service = this.#service;
    this.#service = null;
    await service?.remove();
  }
}

/**
 * The service's code (plain CommonJS, the body of `(require, port, data) => stop`, so the same
 * text works from the sources and the built package). It logs with fs.writeSync: a thread's
 * process.stderr goes through the main thread, which is the one that is stuck.
 */
const WATCHDOG_SERVICE_SOURCE = `
'use strict';
const fs = require('node:fs');
const { limitMs, quarantineAfter, checkMs, shared, target, driverPath, statement } = data;
const state = new BigInt64Array(shared);
let firing = false;

function log(level, fields, msg) {
  const line = Object.assign({ level, time: Date.now(), pid: process.pid, name: 'triggerer', component: 'watchdog' }, fields, { msg });
  try { fs.writeSync(2, JSON.stringify(line) + '\\n'); } catch {}
}

async function recordCulprit(triggerId) {
  const now = new Date().toISOString();
  if (target.dialect === 'sqlite') {
    const Database = require(driverPath);
    const db = new Database(target.file, { timeout: 3000 });
    try { db.prepare(statement).run(quarantineAfter, now, triggerId); } finally { db.close(); }
    return;
  }
  const { Client } = require(driverPath);
  const client = new Client({ connectionString: target.url, connectionTimeoutMillis: 3000, query_timeout: 3000 });
  await client.connect();
  try { await client.query(statement, [quarantineAfter, now, triggerId]); } finally { await client.end().catch(() => {}); }
}

let warnedAt = 0;
const check = setInterval(async () => {
  if (firing) return;
  const lastTurn = Number(Atomics.load(state, 0));
  const heldMs = Date.now() - lastTurn;
  if (heldMs <= limitMs) return;
  const culprit = Number(Atomics.load(state, 1));
  if (culprit === 0) {
    // Not a trigger's step (a task's code in standalone, a synchronous database wait): said once
    // per episode; restarting would not help and might lose a task's work.
    if (warnedAt !== lastTurn) log(40, { code: 'DF_TRIGGER_BLOCKED', held_ms: heldMs, limit_ms: limitMs }, 'the event loop has been held for ' + heldMs + ' ms by code no trigger step accounts for (a task in this process?); not restarting');
    warnedAt = lastTurn;
    return;
  }
  firing = true;
  let recorded = false;
  try {
    await recordCulprit(culprit);
    recorded = true;
  } catch (error) {
    log(50, { code: 'DF_DATABASE', trigger_id: culprit, error: String(error && error.message || error) }, 'the watchdog could not record the culprit: ' + (error && error.message));
  }
  log(60, { code: 'DF_TRIGGER_BLOCKED', trigger_id: culprit, held_ms: heldMs, limit_ms: limitMs, culprit_recorded: recorded },
    'trigger ' + culprit + "'s step has held the event loop for " + heldMs + ' ms (limit ' + limitMs + ' ms): restarting the process; ' +
    'a trigger that does this ' + quarantineAfter + ' times is quarantined');
  process.kill(process.pid, 'SIGKILL');
}, checkMs);
return () => clearInterval(check);
`;
