// The wake-ups of daemons sharing a SQLite file: NotificationHub watches the file for commits by
// other connections (SqliteCommitWatcher). The daemons and signal listeners built on it are
// tested through real processes in test/signals/push-wakeups.test.ts.
import { symlinkSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { sql } from 'kysely';
import pino from 'pino';
import { afterAll, expect, it } from 'vitest';
import { openDatabase } from '../src/db/connect.ts';
import { NotificationHub, WAKE_CHANNEL } from '../src/db/notification-hub.ts';
import { dropTestDatabases, freshDatabaseUrl } from './support/databases.ts';
import { LogCapture, waitFor } from './support/fixtures.ts';

afterAll(dropTestDatabases);

it("on a SQLite file, another connection's commit calls catchUp, the subscriber's own commits do not; --no-push watches nothing; a symbolic link is followed", async () => {
  const url = await freshDatabaseUrl('sqlite');
  // The subscriber opens the file through a link, as a deployment's configured path may be one.
  const link = path.join(path.dirname(url.slice('sqlite:'.length)), 'link.db');
  symlinkSync(url.slice('sqlite:'.length), link);
  const own = openDatabase(`sqlite:${link}`);
  const other = openDatabase(url);
  const quiet = openDatabase(url);
  try {
    await sql`create table scratch (x integer)`.execute(own.db);
    const logs = new LogCapture();
    let caughtUp = 0;
    const unsubscribe = NotificationHub.of(own, pino(logs)).subscribe(
      WAKE_CHANNEL,
      () => {},
      () => caughtUp++,
    );
    let quietCaughtUp = 0;
    const quietHub = NotificationHub.of(quiet, pino(logs));
    quietHub.disable();
    quietHub.subscribe(
      WAKE_CHANNEL,
      () => {},
      () => quietCaughtUp++,
    );

    for (let i = 0; i < 5; i++) await sql`insert into scratch (x) values (${i})`.execute(own.db);
    // Nothing to wait for: the watcher reads the counter 5 ms after a change, and must find it unmoved.
    await delay(300);
    expect(caughtUp).toBe(0);

    await sql`insert into scratch (x) values (100)`.execute(other.db);
    await waitFor(() => caughtUp === 1, { what: "the other connection's commit", timeoutMs: 10_000 });
    await sql`insert into scratch (x) values (101)`.execute(other.db);
    await waitFor(() => caughtUp === 2, { what: 'the next commit', timeoutMs: 10_000 });
    expect(quietCaughtUp).toBe(0);
    expect(logs.lines).toEqual([]);
    unsubscribe();
  } finally {
    await Promise.all([own.close(), other.close(), quiet.close()]);
  }
});
