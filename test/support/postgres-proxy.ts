/**
 * A TCP proxy in front of a test's PostgreSQL database, for tests that disturb what passes
 * between a deferflow process and the server:
 *
 *   const proxy = await postgresProxy(db.url, { dropNotifications: true });
 *   spawnTriggerer(['--db', proxy.url]);   // the same database, through the proxy
 *   await proxy.cut();                     // every connection dropped, new ones refused
 *   await proxy.restore();                 // accepting again, on the same port
 *   proxy.close();
 */
import net from 'node:net';

export interface PostgresProxy {
  /** The database's URL through the proxy. */
  readonly url: string;
  /** NotificationResponse messages dropped so far (with dropNotifications). */
  dropped(): number;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): void;
}

/**
 * `dropNotifications`: pass every server message but NotificationResponse ('A'), as a
 * transaction-mode pooler loses LISTEN/NOTIFY.
 */
export async function postgresProxy(databaseUrl: string, options: { dropNotifications?: boolean } = {}): Promise<PostgresProxy> {
  const target = new URL(databaseUrl);
  const targetPort = Number(target.port || 5432);
  let dropped = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, target.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    if (options.dropNotifications) {
      let pending = Buffer.alloc(0);
      upstream.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        // Every server message is a type byte and an int32 length that counts itself.
        while (pending.length >= 5 && pending.length >= 1 + pending.readInt32BE(1)) {
          const size = 1 + pending.readInt32BE(1);
          if (pending[0] === 0x41) dropped++;
          else client.write(pending.subarray(0, size));
          pending = pending.subarray(size);
        }
      });
    } else {
      upstream.pipe(client);
    }
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  await listen(0);
  const port = (server.address() as net.AddressInfo).port;
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  const dropAll = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    url: url.toString(),
    dropped: () => dropped,
    cut: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        dropAll();
      }),
    restore: () => listen(port),
    close() {
      dropAll();
      server.close();
    },
  };
}
