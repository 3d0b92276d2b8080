/**
 * A TCP proxy in front of a test's PostgreSQL database, for tests that disturb what passes
 * between a deferflow process and the server:
 *
 *   const proxy = await postgresProxy(db.url, { dropNotifications: true });
 *   spawnTriggerer(['--db', proxy.url]);   // the same database, through the proxy
 *   await proxy.cut();                     // every connection dropped, new ones refused
 *   await proxy.restore();                 // accepting again, on the same port
 *   proxy.close();
 *
 * `transactionPooling` stands in for a pooler in transaction mode (PgBouncer's pool_mode =
 * transaction): each client connection is served by two server sessions, and each transaction
 * (each statement outside one) goes to the other session from the last one's; what a server
 * session sends while it is not serving (a NOTIFY) is lost, as it is behind such a pooler.
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
export async function postgresProxy(databaseUrl: string, options: { dropNotifications?: boolean; transactionPooling?: boolean } = {}): Promise<PostgresProxy> {
  const target = new URL(databaseUrl);
  const targetPort = Number(target.port || 5432);
  let dropped = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (options.transactionPooling) {
      poolTransactions(
        client,
        () => net.connect(targetPort, target.hostname),
        sockets,
        () => dropped++,
      );
      return;
    }
    const upstream = net.connect(targetPort, target.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    if (options.dropNotifications) {
      upstream.on(
        'data',
        messages((message) => {
          if (message[0] === 0x41) dropped++;
          else client.write(message);
        }),
      );
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

/** Splits a stream into PostgreSQL messages (a type byte, then an int32 length that counts itself); `untyped` leading messages have no type byte (the startup message). */
function messages(onMessage: (message: Buffer) => void, untyped = 0): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    for (;;) {
      const head = untyped > 0 ? 0 : 1;
      if (pending.length < head + 4) return;
      const size = head + pending.readInt32BE(head);
      if (pending.length < size) return;
      if (untyped > 0) untyped--;
      onMessage(pending.subarray(0, size));
      pending = pending.subarray(size);
    }
  };
}

/** One client connection behind transactionPooling (see postgresProxy). */
function poolTransactions(client: net.Socket, connect: () => net.Socket, sockets: Set<net.Socket>, onDropped: () => void): void {
  const sessions = [connect(), connect()];
  let serving = 0;
  // The second session's own start-up answers are not the client's: it joins once it is ready.
  let secondReady = false;
  const queued: Buffer[] = [];
  sockets.add(client);
  for (const session of sessions) sockets.add(session);
  const end = () => {
    for (const socket of [client, ...sessions]) {
      socket.destroy();
      sockets.delete(socket);
    }
  };
  client.on('error', end).on('close', end);
  sessions.forEach((session, index) => {
    session.on('error', end).on('close', end);
    session.on(
      'data',
      messages((message) => {
        const type = String.fromCharCode(message[0]!);
        if (index === 1 && !secondReady) {
          if (type === 'Z') {
            secondReady = true;
            for (const waiting of queued.splice(0)) sessions[serving]!.write(waiting);
          }
          return;
        }
        if (index !== serving || type === 'A') {
          if (type === 'A') onDropped();
          return;
        }
        client.write(message);
        // Idle again (not inside a transaction): the next statement goes to the other session.
        if (type === 'Z' && message[5] === 0x49) serving = 1 - serving;
      }),
    );
  });
  let started = false;
  client.on(
    'data',
    messages((message) => {
      // The startup message (both sessions start as the client's), and Terminate ('X').
      if (!started || message[0] === 0x58) {
        started = true;
        for (const session of sessions) session.write(message);
        return;
      }
      if (!secondReady) queued.push(message);
      else sessions[serving]!.write(message);
    }, 1),
  );
}
