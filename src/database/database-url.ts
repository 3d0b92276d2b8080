import path from 'node:path';
import { InvalidDatabaseUrlError } from '../vocabulary/errors.ts';

/** The database when none is given: an SQLite file in the working directory. */
export const DEFAULT_DATABASE_URL = 'sqlite:./deferflow.db';

export type DatabaseTarget =
  | { readonly dialect: 'sqlite'; readonly url: string; readonly file: string }
  | { readonly dialect: 'postgres'; readonly url: string };

/**
 * One URL picks the dialect: `sqlite:PATH` (relative paths resolve from the working
 * directory; `sqlite::memory:` for a private in-memory database) or `postgres://…` /
 * `postgresql://…` in libpq form (`?options=-c search_path=…` selects a schema).
 */
export function parseDatabaseUrl(url: string): DatabaseTarget {
  const trimmed = url.trim();
  if (trimmed.startsWith('sqlite:')) {
    const rest = trimmed.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (rest === '') throw new InvalidDatabaseUrlError(url, 'sqlite: needs a file path, e.g. sqlite:./deferflow.db');
    const file = rest === ':memory:' ? ':memory:' : path.resolve(rest);
    return { dialect: 'sqlite', url: trimmed, file };
  }
  if (/^postgres(ql)?:\/\//.test(trimmed)) {
    try {
      new URL(trimmed);
    } catch {
      throw new InvalidDatabaseUrlError(url, 'is not a valid postgres:// URL');
    }
    return { dialect: 'postgres', url: trimmed };
  }
  // A bare file path is the likeliest slip: name the URL it was probably meant as.
  const looksLikeFile = /\.(db|sqlite3?)$/i.test(trimmed) || /^(\.{0,2}\/|~\/)/.test(trimmed);
  throw new InvalidDatabaseUrlError(
    url,
    `expected sqlite:PATH or postgres://USER@HOST:PORT/DATABASE${looksLikeFile && !/^[a-z][\w+.-]*:/i.test(trimmed) ? `; did you mean sqlite:${trimmed}?` : ''}`,
  );
}

/** The URL with any password masked, for logs and printed configuration. */
export function redactDatabaseUrl(url: string): string {
  return url.replace(/^(postgres(?:ql)?:\/\/[^:/@]+:)[^@]*@/, '$1***@');
}
