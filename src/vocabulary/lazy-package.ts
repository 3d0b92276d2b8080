import { createRequire } from 'node:module';
import { MissingPackageError } from './errors.ts';
import type BetterSqlite3 from 'better-sqlite3';
import type pg from 'pg';

const require = createRequire(import.meta.url);

/**
 * A package loaded when first used rather than when a module naming it is imported. Every
 * deferflow process imports the whole public API (a task runner too, for its DAG files), but
 * most need only some of these: a runner no database driver, metrics or pretty logs; a SQLite
 * process no pg. Loading pg, better-sqlite3, prom-client, pino-pretty and cron-parser up front
 * was about 130 ms of every process start (a task runner's 430 ms, a CLI command's).
 */
export function lazyPackage<T>(name: string): () => T {
  let loaded: T | undefined;
  return () => {
    loaded ??= require(name) as T;
    return loaded;
  };
}

/**
 * An optional peer dependency (a broker's client), loaded when first used: MissingPackageError
 * naming it and `neededBy` when it is not installed, so only users of the feature install it.
 */
export function optionalPackage<T>(name: string, neededBy: string): () => T {
  const load = lazyPackage<T>(name);
  return () => {
    try {
      return load();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && String((error as Error).message).includes(`'${name}'`))
        throw new MissingPackageError(name, neededBy);
      throw error;
    }
  };
}

/** The database drivers, named once for every module that opens a connection. */
export const betterSqlite3Package: () => typeof BetterSqlite3 = lazyPackage('better-sqlite3');
export const pgPackage: () => typeof pg = lazyPackage('pg');
