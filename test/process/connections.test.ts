// Named connections: DEFERFLOW_CONN_<NAME> URLs, listed with passwords masked, never stored.
import { describe, expect, it } from 'vitest';
import { connectionFromEnv, listConnections, maskConnectionUrl } from '../../src/index.ts';
import { spawnDeferflow } from '../support/processes.ts';

describe('connections', () => {
  it('are read from DEFERFLOW_CONN_<NAME>; a missing one names the variable to set', () => {
    const env = { DEFERFLOW_CONN_WAREHOUSE: 'postgres://u:p@h/db', DEFERFLOW_CONN_EMPTY: ' ', OTHER: 'x' };
    expect(connectionFromEnv('warehouse', env)).toEqual({ name: 'warehouse', url: 'postgres://u:p@h/db' });
    expect(listConnections(env)).toEqual([{ name: 'warehouse', url: 'postgres://u:p@h/db' }]);
    expect(() => connectionFromEnv('missing', env)).toThrow('no connection "missing": set DEFERFLOW_CONN_MISSING to its URL');
    expect(() => connectionFromEnv('empty', env)).toThrow('set DEFERFLOW_CONN_EMPTY');
    expect(() => connectionFromEnv('bad-name', env)).toThrow('connection name "bad-name" is not a name');
  });

  it.each([
    ['postgres://user:s3cret@host:5432/db', 'postgres://user:***@host:5432/db'],
    ['https://bot:t0ken@api.example.test/x', 'https://bot:***@api.example.test/x'],
    ['postgres://host/db?user=u&password=s3cret&sslmode=require', 'postgres://host/db?user=u&password=***&sslmode=require'],
    ['https://api.example.test/v1?region=eu&__extra__=%7B%22Authorization%22%3A%22Bearer%20t0ken%22%7D', 'https://api.example.test/v1?region=eu&__extra__=***'],
    ['sqlite:./local.db', 'sqlite:./local.db'],
    ['postgres://user@host/db', 'postgres://user@host/db'],
  ])('mask %s', (url, masked) => {
    expect(maskConnectionUrl(url)).toBe(masked);
  });

  it('deferflow connections list prints them, passwords masked', async () => {
    const env = { DEFERFLOW_CONN_WAREHOUSE: 'postgres://analyst:s3cret@db.internal:5432/dw', DEFERFLOW_CONN_LOCAL: 'sqlite:./local.db' };
    const table = spawnDeferflow(['connections', 'list'], env);
    expect((await table.exit).code).toBe(0);
    expect(table.text).toEqual([
      expect.stringMatching(/^NAME +URL$/),
      expect.stringMatching(/^local +sqlite:\.\/local\.db$/),
      expect.stringMatching(/^warehouse +postgres:\/\/analyst:\*\*\*@db\.internal:5432\/dw$/),
    ]);
    const json = spawnDeferflow(['connections', 'list', '--json'], env);
    expect((await json.exit).code).toBe(0);
    expect(json.text.join('')).not.toContain('s3cret');
    expect(JSON.parse(json.text.join(''))).toEqual([
      { name: 'local', url: 'sqlite:./local.db' },
      { name: 'warehouse', url: 'postgres://analyst:***@db.internal:5432/dw' },
    ]);
  }, 30_000);
});
