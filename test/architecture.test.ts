// Rules of the code's shape that review alone would let slip.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './support/processes.ts';

const sources = (dir: string) =>
  readdirSync(path.join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => path.join(dir, file));

describe('the code', () => {
  it('keeps every SQL statement in src/storage (operations) and src/db (connections, dialects, migrations)', () => {
    const outside = sources('src')
      .filter((file) => !file.startsWith(path.join('src', 'storage')) && !file.startsWith(path.join('src', 'db')))
      .flatMap((file) =>
        readFileSync(path.join(REPO_ROOT, file), 'utf8')
          .split('\n')
          .flatMap((line, i) => (/\.(selectFrom|updateTable|insertInto|deleteFrom)\(|\bsql`/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
      );
    expect(outside).toEqual([]);
  });
});
