/**
 * The values deferflow uses from kysely, loaded from its CommonJS build. Its ES module build is
 * 262 files, which Node 20's ES module loader reads in ~0.24 s of CPU against ~0.10 s for the
 * CommonJS build (measured on the 2-core machine, 2026-11-28): a cost every daemon, command and
 * test process that opens a database paid at start. Types still come from `kysely` itself (they
 * are the same package's), and a user's own `import { sql } from 'kysely'` builds queries these
 * run: kysely's query nodes are plain objects, whichever build made them.
 */
import { createRequire } from 'node:module';
import type * as kyselyTypes from 'kysely';

const kysely = createRequire(import.meta.url)('kysely') as typeof kyselyTypes;

export const sql = kysely.sql;
export const CompiledQuery = kysely.CompiledQuery;
export type CompiledQuery<O = unknown> = kyselyTypes.CompiledQuery<O>;
/** The class; its type is kysely's own (`import type { Kysely } from 'kysely'`), so that declarations name that. */
export const Kysely = kysely.Kysely;
export const Migrator = kysely.Migrator;
export type Migrator = kyselyTypes.Migrator;
export const PostgresDialect = kysely.PostgresDialect;
export type PostgresDialect = kyselyTypes.PostgresDialect;
export const PostgresDriver = kysely.PostgresDriver;
export type PostgresDriver = kyselyTypes.PostgresDriver;
export const SqliteAdapter = kysely.SqliteAdapter;
export type SqliteAdapter = kyselyTypes.SqliteAdapter;
export const SqliteDialect = kysely.SqliteDialect;
export type SqliteDialect = kyselyTypes.SqliteDialect;
export const SqliteDriver = kysely.SqliteDriver;
export type SqliteDriver = kyselyTypes.SqliteDriver;
