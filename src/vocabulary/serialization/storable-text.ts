/**
 * Text the database cannot store, and how deferflow deals with it the same way on both dialects.
 *
 * PostgreSQL refuses U+0000 in text and jsonb, and lone UTF-16 surrogates in jsonb (a lone one in
 * text is silently written as U+FFFD by the driver); SQLite stores both. So that one dialect never
 * accepts what the other refuses:
 * - values (kwargs, next_kwargs, event payloads, return values) holding such text are refused
 *   where they enter, with DF_NOT_STORABLE and the path to the value (see json.ts);
 * - text deferflow writes itself about something (error messages, tracebacks, log lines) is made
 *   storable with storableText(): each such character becomes U+FFFD.
 */
const NOT_STORABLE_SOURCE = '\\u0000|[\\ud800-\\udbff](?![\\udc00-\\udfff])|(?<![\\ud800-\\udbff])[\\udc00-\\udfff]';
const NOT_STORABLE_ALL = new RegExp(NOT_STORABLE_SOURCE, 'g');
const NOT_STORABLE_ONE = new RegExp(NOT_STORABLE_SOURCE);

/** `text` with every character the database cannot store replaced by U+FFFD. */
export function storableText(text: string): string {
  return NOT_STORABLE_ONE.test(text) ? text.replace(NOT_STORABLE_ALL, '\ufffd') : text;
}

/** Why `text` cannot be stored (naming the first bad character and where), or null when it can. */
export function unstorableReason(text: string): string | null {
  const found = NOT_STORABLE_ONE.exec(text);
  if (found === null) return null;
  const what = found[0] === '\u0000' ? 'U+0000 (NUL)' : `a lone surrogate (U+${found[0].charCodeAt(0).toString(16).toUpperCase()})`;
  return `holds ${what} at character ${found.index}, which the database cannot store`;
}

/** A JSON.stringify replacer that makes strings and object keys storable. */
export function storableJsonReplacer(_key: string, value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    let changed = false;
    const entries = Object.entries(value).map(([key, inner]) => {
      const storable = storableText(key);
      if (storable !== key) changed = true;
      return [storable, inner] as const;
    });
    return changed ? Object.fromEntries(entries) : value;
  }
  return value;
}

/** The same characters as JSON.stringify escapes them (it writes valid surrogate pairs as they are). */
const ESCAPED_NOT_STORABLE = /\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/** JSON text of `value` (already known to be JSON) with unstorable characters made storable. */
export function storableJson(value: unknown): string {
  const text = JSON.stringify(value);
  return ESCAPED_NOT_STORABLE.test(text) ? JSON.stringify(value, storableJsonReplacer) : text;
}
