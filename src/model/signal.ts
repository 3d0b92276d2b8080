import { InvalidSignalError } from '../vocabulary/errors.ts';
import { toJsonText, type JsonValue } from '../vocabulary/serialization/json.ts';

/**
 * A signal (AIP-35): a key, a JSON value, and the key's version, counted up by every send from 1.
 * Versions never go back or repeat, even after old signals are pruned.
 */
export interface Signal {
  /** The key it was sent on. */
  readonly key: string;
  /** Its version: the key's count of sends, from 1. */
  readonly version: number;
  /** Its value (JSON). */
  readonly value: JsonValue;
  /** When it was sent, epoch ms. */
  readonly sentAt: number;
}

/** Longest key, in characters. */
export const MAX_SIGNAL_KEY_LENGTH = 200;
/** Largest value, in bytes of JSON text (UTF-8): a signal says that something happened, not the data itself. */
export const MAX_SIGNAL_VALUE_BYTES = 64 * 1024;

// Readable in a URL path, a shell and a log line: letters, digits and . _ : / @ = + -
const KEY = /^[A-Za-z0-9][A-Za-z0-9._:/@=+-]*$/;

/** The key itself, or DF_INVALID_SIGNAL naming what is wrong with it. */
export function checkSignalKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_SIGNAL_KEY_LENGTH || !KEY.test(key)) {
    throw new InvalidSignalError(
      `signal key ${JSON.stringify(key) ?? String(key)} is not a key: use 1 to ${MAX_SIGNAL_KEY_LENGTH} characters, letters, digits and . _ : / @ = + -, ` +
        'starting with a letter or digit (e.g. "orders.loaded" or "dataset/sales:2026-11-23")',
    );
  }
  return key;
}

/** The value as JSON text, or DF_NOT_JSON / DF_INVALID_SIGNAL (too large) naming the key. */
export function signalValueText(key: string, value: unknown): string {
  const text = toJsonText(value === undefined ? null : value, `signal ${key} value`);
  const bytes = Buffer.byteLength(text);
  if (bytes > MAX_SIGNAL_VALUE_BYTES) {
    throw new InvalidSignalError(
      `signal ${key}: the value is ${bytes} bytes of JSON; a signal carries at most ${MAX_SIGNAL_VALUE_BYTES} (send where the data is, not the data)`,
    );
  }
  return text;
}

/** A version as the caller gave it (sinceVersion): a whole number, 0 or more. */
export function checkSignalVersion(version: unknown, what: string): number {
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 0) {
    throw new InvalidSignalError(`${what} ${JSON.stringify(version) ?? String(version)} is not a signal version: a whole number, 0 or more`);
  }
  return version;
}
