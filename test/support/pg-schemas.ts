/**
 * Private PostgreSQL schemas for tests, the schema dump script and the benchmark: each gets a
 * fresh schema, selected through the URL (`options=-c search_path=NAME`, as a user selects one),
 * and drops it afterwards.
 */
import crypto from 'node:crypto';
import pg from 'pg';

/** `base` with `-c search_path=<schema>` added to its `options` query parameter (keeping any options it has). */
export function withSearchPath(base: string, schema: string): string {
  const url = new URL(base);
  const existing = url.searchParams.get('options');
  url.searchParams.set('options', `${existing ? `${existing} ` : ''}-c search_path=${schema}`);
  return url.toString();
}

/** Runs `fn` with a connected client, then closes it. */
export async function withClient<T>(connectionString: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 10_000 });
  // A connection-level error after connect() must not crash the process.
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export interface ScratchSchema {
  readonly name: string;
  /** The base URL selecting this schema. */
  readonly url: string;
  drop(): Promise<void>;
}

/** Creates an empty schema named `<prefix>_<random hex>` on the server at `baseUrl`. */
export async function createScratchSchema(baseUrl: string, prefix: string): Promise<ScratchSchema> {
  const name = `${prefix}_${crypto.randomBytes(8).toString('hex')}`;
  await withClient(baseUrl, (client) => client.query(`create schema ${client.escapeIdentifier(name)}`));
  return {
    name,
    url: withSearchPath(baseUrl, name),
    drop: () => dropSchemas(baseUrl, [name]),
  };
}

export async function dropSchemas(baseUrl: string, names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  await withClient(baseUrl, async (client) => {
    for (const name of names) await client.query(`drop schema if exists ${client.escapeIdentifier(name)} cascade`);
  });
}
