/**
 * A TCP proxy in front of a server, for the failure a restart rarely hits: a connection lost after
 * the server acted on a command but before its reply arrived (a broker that delivered messages the
 * client never saw).
 *
 *   const proxy = await startTcpProxy(6379);   // clients connect to 127.0.0.1:<proxy.port>
 *   proxy.dropReplies();                       // the server's replies go nowhere from now on
 *   proxy.cut();                               // every connection closed; new ones pass as before
 *   proxy.openConnections                      // how many clients are connected through it now
 *   await proxy.close();
 */
import net from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** Clients connected through the proxy now. */
  readonly openConnections: number;
  /** From now on, what the server sends is dropped (what clients send still reaches it). */
  dropReplies(): void;
  /** Closes every connection open now and lets replies through again. */
  cut(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  let dropping = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => {
      if (!dropping) client.write(chunk);
    });
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const cut = () => {
    for (const { client, upstream } of pairs) {
      client.destroy();
      upstream.destroy();
    }
    pairs.clear();
    dropping = false;
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    get openConnections() {
      return pairs.size;
    },
    dropReplies() {
      dropping = true;
    },
    cut,
    async close() {
      cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
