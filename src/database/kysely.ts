/**
 * The values deferflow uses from kysely, loaded from its CommonJS build. Its ES module build is
 * 262 files, which Node 20's ES module loader reads in ~0.24 s of CPU against ~0.10 s for the
 * CommonJS build (measured on the 2-core machine, 2026-11-28): a cost every daemon, command and
 * test process that opens a database paid at start. Types still come from `kysely` itself (they
 * are the same package's), and a user's own `import { sql } from 'kysely'` builds queries these
 * run: kysely's query nodes are plain objects, whichever build made them. The built package
 * replaces this module with kysely's ES module build, bundled and tree-shaken (scripts/build.ts).
 */
import { createRequire } from 'node:module';
import type * as kyselyTypes from 'kysely';

const kysely = createRequire(import.meta.url)('kysely') as typeof kyselyTypes;

/** The classes' types are kysely's own (`import type { Kysely } from 'kysely'`), so that declarations name those. */
export const { sql, CompiledQuery, Kysely, Migrator, PostgresDialect, PostgresDriver, SqliteAdapter, SqliteDialect, SqliteDriver } = kysely;
/** The two that deferflow also names as types (a compiled query's and the driver it extends). */
export type CompiledQuery<O = unknown> = kyselyTypes.CompiledQuery<O>;
export type PostgresDriver = kyselyTypes.PostgresDriver;
