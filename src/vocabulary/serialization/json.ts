import { createHash } from 'node:crypto';
import { NotJsonError, NotStorableError } from '../errors.ts';
import { unstorableReason } from './storable-text.ts';

/**
 * deferflow stores kwargs, next_kwargs and event payloads as JSON and nothing else:
 * nothing is ever eval'd or rebuilt from a class name inside a value. Values are checked
 * where they enter (defer time, event time) so a bad one is refused with the path to it
 * instead of being silently changed by JSON.stringify (undefined dropped, NaN → null,
 * Date → string, Map → {}). Text the database cannot store (U+0000, a lone surrogate) is
 * refused the same way on both dialects (see storable-text.ts).
 */
export type JsonPrimitive = string | number | boolean | null;
/** A JSON value: what kwargs, events and return values are made of. */
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

export function assertJsonValue(value: unknown, path: string): asserts value is JsonValue {
  checkJson(value, path, new Set());
}

export function assertJsonObject(value: unknown, path: string): asserts value is JsonObject {
  if (!isPlainObject(value)) {
    const kindOfJson = value === null || Array.isArray(value) || ['string', 'number', 'boolean'].includes(typeof value);
    throw new NotJsonError(path, `expected a JSON object ({"key": value, ...}), got ${describeKind(value)}`, !kindOfJson);
  }
  checkJson(value, path, new Set());
}

/** Checks `value` and returns its JSON text. */
export function toJsonText(value: unknown, path: string): string {
  assertJsonValue(value, path);
  return JSON.stringify(value);
}

/** JSON with object keys sorted at every level: equal values give equal text. */
export function canonicalJson(value: JsonValue): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key]!)}`).join(',')}}`;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function checkJson(value: unknown, path: string, ancestors: Set<object>): void {
  switch (typeof value) {
    case 'string': {
      const why = unstorableReason(value);
      if (why !== null) throw new NotStorableError(path, why);
      return;
    }
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new NotJsonError(path, `${value} is not a finite number`);
      return;
    case 'object':
      break;
    default:
      throw new NotJsonError(path, `${describeKind(value)} is not JSON`);
  }
  if (value === null) return;
  if (ancestors.has(value)) throw new NotJsonError(path, 'the value refers to itself (a cycle)');
  ancestors.add(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) checkJson(value[i], `${path}[${i}]`, ancestors);
  } else if (isPlainObject(value)) {
    for (const [key, item] of Object.entries(value)) {
      const why = unstorableReason(key);
      if (why !== null) throw new NotStorableError(`${path}[${JSON.stringify(key)}]`, `the key ${why}`);
      checkJson(item, `${path}.${key}`, ancestors);
    }
  } else {
    throw new NotJsonError(path, `${describeKind(value)} is not JSON`);
  }
  ancestors.delete(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describeKind(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') {
    if (Array.isArray(value)) return 'an array';
    const name = (value as object).constructor?.name;
    if (value instanceof Date) return 'a Date (pass an ISO string instead)';
    return name && name !== 'Object' ? `an instance of ${name}` : 'an object';
  }
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'bigint') return 'a bigint';
  return typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`;
}
