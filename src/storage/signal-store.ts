import type { StorageContext } from './context.ts';
import { signalScheduleStart } from './latest-scheduled-run.ts';
import { latestSignalVersions, listSignalVersions, pruneSignals, recentSignalKeys, sendSignal, signalsAfter, type SignalVersion } from './signals.ts';
import {
  applySignalAction,
  pendingSignalActions,
  readActedSignal,
  recordSignalStarts,
  startOnSignal,
  type PendingSignalAction,
  type PlanToApply,
  type SignalStart,
  type SignalActionOutcome,
} from './signal-actions.ts';
import type { ActedSignal } from '../model/signal-actions.ts';
import type { Signal } from '../model/signal.ts';
import { countSignalActionTasks, signalActionKeys } from './signal-audience.ts';

/** Signals: sendSignal, latestSignalVersions, recentSignalKeys, listSignalVersions, signalsAfter, pruneSignals, pendingSignalActions, applySignalAction, startOnSignal, recordSignalStarts, readActedSignal, signalScheduleStart, countSignalActionTasks, signalActionKeys. */
export class SignalStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  /** Sends a signal (value as JSON text): returns its version. */
  sendSignal(key: string, valueJson: string, now = Date.now(), sentBy: string | null = null): Promise<number> {
    return sendSignal(this.#context, key, valueJson, now, sentBy);
  }

  latestSignalVersions(keys: readonly string[]): Promise<Map<string, number>> {
    return latestSignalVersions(this.#context, keys);
  }

  /** The keys most recently sent on, newest first, with their latest version and when it was sent. */
  recentSignalKeys(limit: number): Promise<{ key: string; version: number; sentAt: number }[]> {
    return recentSignalKeys(this.#context, limit);
  }

  /** A key's latest `limit` signals, newest first. */
  listSignalVersions(key: string, limit: number): Promise<SignalVersion[]> {
    return listSignalVersions(this.#context, key, limit);
  }

  signalsAfter(after: ReadonlyMap<string, number>, limit: number): Promise<Signal[]> {
    return signalsAfter(this.#context, after, limit);
  }

  pruneSignals(before: number): Promise<number> {
    return pruneSignals(this.#context, before);
  }

  pendingSignalActions(limit: number): Promise<PendingSignalAction[]> {
    return pendingSignalActions(this.#context, limit);
  }

  applySignalAction(pending: PendingSignalAction, plan: PlanToApply, now = Date.now()): Promise<SignalActionOutcome> {
    return applySignalAction(this.#context, pending, plan, now);
  }

  startOnSignal(taskInstanceId: number, starts: readonly SignalStart[], now = Date.now()): Promise<boolean> {
    return startOnSignal(this.#context, taskInstanceId, starts, now);
  }

  recordSignalStarts(taskInstanceId: number, starts: readonly SignalStart[]): Promise<void> {
    return recordSignalStarts(this.#context, taskInstanceId, starts);
  }

  readActedSignal(taskInstanceId: number, key: string): Promise<ActedSignal | null> {
    return readActedSignal(this.#context, taskInstanceId, key);
  }

  signalScheduleStart(dagId: string, key: string): Promise<number> {
    return signalScheduleStart(this.#context, dagId, key);
  }

  /** The task instances of unfinished runs with a signal action on `key`. */
  countSignalActionTasks(key: string): Promise<number> {
    return countSignalActionTasks(this.#context, key);
  }

  /** Every key a task instance of an unfinished run has a signal action on. */
  signalActionKeys(): Promise<string[]> {
    return signalActionKeys(this.#context);
  }
}
