import { existsSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { LONGEST_FIRST } from '../support/longest-first-sequencer.ts';
import { REPO_ROOT } from '../support/processes.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('freshDatabaseUrl(%s)', (dialect) => {
  it('returns a usable, private database', async () => {
    const url = await freshDatabaseUrl(dialect);

    if (dialect === 'sqlite') {
      expect(url).toMatch(/^sqlite:\//);
      const db = new Database(url.slice('sqlite:'.length));
      try {
        db.exec('create table probe (id integer primary key, v text)');
        db.prepare('insert into probe (v) values (?)').run('x');
        expect(db.prepare('select count(*) as n from probe').get()).toEqual({ n: 1 });
      } finally {
        db.close();
      }
      return;
    }

    const schema = new URL(url).searchParams.get('options')?.match(/search_path=(\S+)/)?.[1];
    expect(schema).toMatch(/^t_[0-9a-f]+$/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query('create table probe (id integer primary key)');
      // Other test files may have their own `probe` tables in their own schemas,
      // so ask about this schema and `public` only.
      const found = await client.query<{ table_schema: string }>(
        `select table_schema from information_schema.tables
          where table_name = 'probe' and table_schema in ($1, 'public')`,
        [schema],
      );
      expect(found.rows.map((r) => r.table_schema)).toEqual([schema]);
      const current = await client.query<{ s: string }>('select current_schema() as s');
      expect(current.rows[0]?.s).toBe(schema);
    } finally {
      await client.end();
    }
  });

  it('gives a different database on every call', async () => {
    const [a, b] = await Promise.all([freshDatabaseUrl(dialect), freshDatabaseUrl(dialect)]);
    expect(a).not.toEqual(b);
  });
});

describe('the longest-first order of test files', () => {
  it('names files that exist, each once (a renamed file would silently start late again)', () => {
    expect(new Set(LONGEST_FIRST).size).toBe(LONGEST_FIRST.length);
    expect(LONGEST_FIRST.filter((file) => !existsSync(path.join(REPO_ROOT, file)))).toEqual([]);
  });
});
