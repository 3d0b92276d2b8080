/**
 * Brokers of the test's own (redis-server, nats-server on PATH, as on the development machine and
 * in CI), for what must not touch the shared ones: a broker killed (SIGKILL) and started again on
 * the same port, its data kept (Redis: append-only file, fsync on every write; NATS: JetStream's
 * file store), mid-test.
 *
 *   const server = await startRedisServer(dir);   // server.url: redis://127.0.0.1:<port>
 *   const nats = await startNatsServer(dir);      // nats.url: nats://127.0.0.1:<port>
 *   const mqtt = await startMosquitto(dir);       // mqtt.url: mqtt://127.0.0.1:<port>
 *   await server.restart();
 *   await server.stop();
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface BrokerServer {
  readonly url: string;
  /** Stopped (by default killed: SIGKILL), then the same server again on the same port and data. */
  restart(signal?: NodeJS.Signals): Promise<void>;
  stop(): Promise<void>;
}

export function startRedisServer(dir: string): Promise<BrokerServer> {
  return startBroker({
    command: 'redis-server',
    args: (port) => ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''],
    ready: /Ready to accept connections/,
    url: (port) => `redis://127.0.0.1:${port}`,
    install: 'apt install redis-server',
  });
}

export function startNatsServer(dir: string): Promise<BrokerServer> {
  return startBroker({
    command: 'nats-server',
    // JetStream's file store fsyncs on its own interval; -sync always would be slower than a test needs to see a restart keep what it acknowledged.
    args: (port) => ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir],
    ready: /Server is ready/,
    url: (port) => `nats://127.0.0.1:${port}`,
    install: 'apt install nats-server',
  });
}

/**
 * Mosquitto keeps sessions and their queued messages on disk only when it stops (or at an autosave):
 * killed, it loses what came since. Its tests restart it with SIGTERM.
 */
export function startMosquitto(dir: string): Promise<BrokerServer> {
  return startBroker({
    command: 'mosquitto',
    args: (port) => {
      const config = path.join(dir, 'mosquitto.conf');
      // As the user running the tests (run as root, mosquitto would switch to its own user, who cannot write `dir`); logs to stderr, unbuffered.
      const lines = [
        `listener ${port} 127.0.0.1`,
        'allow_anonymous true',
        'persistence true',
        `persistence_location ${dir}/`,
        'log_dest stderr',
        `user ${os.userInfo().username}`,
      ];
      writeFileSync(config, `${lines.join('\n')}\n`);
      return ['-c', config];
    },
    ready: /mosquitto version .* running/,
    url: (port) => `mqtt://127.0.0.1:${port}`,
    install: 'apt install mosquitto',
  });
}

interface BrokerCommand {
  readonly command: string;
  readonly args: (port: number) => string[];
  /** What the server prints once it accepts connections. */
  readonly ready: RegExp;
  readonly url: (port: number) => string;
  readonly install: string;
}

async function startBroker(broker: BrokerCommand): Promise<BrokerServer> {
  const port = await freePort();
  let child: ChildProcess = await launch(broker, port);
  return {
    url: broker.url(port),
    async restart(signal: NodeJS.Signals = 'SIGKILL') {
      await kill(child, signal);
      child = await launch(broker, port);
    },
    async stop() {
      await kill(child, 'SIGTERM');
    },
  };
}

async function launch(broker: BrokerCommand, port: number): Promise<ChildProcess> {
  const child = spawn(broker.command, broker.args(port), { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left running behind a failed test.
      child.kill('SIGKILL');
      reject(new Error(`${broker.command} on ${port} not ready in 10 s:\n${output}`));
    }, 10_000);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${broker.command} could not be started (${error.message}): install it (Debian: ${broker.install})`));
    });
    const read = (chunk: Buffer) => {
      output += chunk;
      if (broker.ready.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
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
