/**
 * A Redis server of the test's own (redis-server on PATH, as on the development machine and in
 * CI), for what must not touch the shared one on 6379: a broker killed (SIGKILL) and started
 * again on the same port, its data kept (append-only file, fsync on every write), mid-test.
 *
 *   const server = await startRedisServer(dir);   // server.url: redis://127.0.0.1:<port>
 *   await server.restart();
 *   await server.stop();
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';

export interface RedisServer {
  readonly url: string;
  /** SIGKILL, then the same server again on the same port and data. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startRedisServer(dir: string): Promise<RedisServer> {
  const port = await freePort();
  let child: ChildProcess = await launch(dir, port);
  return {
    url: `redis://127.0.0.1:${port}`,
    async restart() {
      await kill(child, 'SIGKILL');
      child = await launch(dir, port);
    },
    async stop() {
      await kill(child, 'SIGTERM');
    },
  };
}

async function launch(dir: string, port: number): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server on ${port} not ready in 10 s:\n${output}`)), 10_000);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`redis-server could not be started (${error.message}): install it (Debian: apt install redis-server)`));
    });
    child.stdout!.on('data', () => {
      if (/Ready to accept connections/.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  await ready;
  return child;
}

async function kill(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  await exited;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}
