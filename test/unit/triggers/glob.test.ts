import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { findFirstFile, globToRegExp, hasMagic, matchesGlob, segmentToRegExp, splitGlob } from '../../../triggers/glob.ts';

describe('segmentToRegExp', () => {
  it('matches *, ? and sets within one name', () => {
    const csv = segmentToRegExp('*.csv');
    expect(csv.test('data.csv')).toBe(true);
    expect(csv.test('.csv')).toBe(false); // a wildcard does not match a leading dot
    expect(csv.test('data.csv.tmp')).toBe(false);
    expect(segmentToRegExp('part-??.txt').test('part-07.txt')).toBe(true);
    expect(segmentToRegExp('part-??.txt').test('part-7.txt')).toBe(false);
    expect(segmentToRegExp('file[abc].log').test('fileb.log')).toBe(true);
    expect(segmentToRegExp('file[abc].log').test('filed.log')).toBe(false);
    expect(segmentToRegExp('file[a-c].log').test('filec.log')).toBe(true);
    expect(segmentToRegExp('file[!a-c].log').test('filec.log')).toBe(false);
    expect(segmentToRegExp('file[^a-c].log').test('filed.log')).toBe(true);
  });

  it('treats regexp characters and unclosed sets literally', () => {
    expect(segmentToRegExp('a+b(1).{x}|$^').test('a+b(1).{x}|$^')).toBe(true);
    expect(segmentToRegExp('a+b').test('aab')).toBe(false);
    expect(segmentToRegExp('x.csv').test('xycsv')).toBe(false);
    expect(segmentToRegExp('a[b').test('a[b')).toBe(true);
    expect(segmentToRegExp('[[]x]').test('[x]')).toBe(true);
    expect(segmentToRegExp('[]]').test(']')).toBe(true);
    expect(segmentToRegExp('[*]').test('*')).toBe(true);
    expect(segmentToRegExp('[*]').test('a')).toBe(false);
    expect(segmentToRegExp('a\\b').test('a\\b')).toBe(true);
  });

  it('matches dot-names only when the pattern starts with a dot', () => {
    expect(segmentToRegExp('.*').test('.hidden')).toBe(true);
    expect(segmentToRegExp('*').test('.hidden')).toBe(false);
    expect(segmentToRegExp('?hidden').test('.hidden')).toBe(false);
    expect(segmentToRegExp('.hidden').test('.hidden')).toBe(true);
  });

  it('matches one character for ? even outside the BMP', () => {
    expect(segmentToRegExp('?.txt').test('😀.txt')).toBe(true);
  });

  it('throws on a reversed range', () => {
    expect(() => segmentToRegExp('[z-a]')).toThrow(SyntaxError);
  });
});

describe('globToRegExp / matchesGlob', () => {
  it('keeps * and ? within a segment', () => {
    expect(matchesGlob('/data/*.csv', '/data/a.csv')).toBe(true);
    expect(matchesGlob('/data/*.csv', '/data/sub/a.csv')).toBe(false);
    expect(matchesGlob('/data/?/x', '/data/a/x')).toBe(true);
    expect(matchesGlob('/data/?/x', '/data/ab/x')).toBe(false);
  });

  it('lets ** match zero or more directories only when recursive', () => {
    const options = { recursive: true };
    expect(matchesGlob('/d/**/done.flag', '/d/done.flag', options)).toBe(true);
    expect(matchesGlob('/d/**/done.flag', '/d/a/done.flag', options)).toBe(true);
    expect(matchesGlob('/d/**/done.flag', '/d/a/b/c/done.flag', options)).toBe(true);
    expect(matchesGlob('/d/**/done.flag', '/d/.git/done.flag', options)).toBe(false);
    expect(matchesGlob('/d/**', '/d/a/b', options)).toBe(true);
    expect(matchesGlob('/d/**/**/x', '/d/a/x', options)).toBe(true);
    // Without recursive, ** is *: exactly one segment.
    expect(matchesGlob('/d/**/done.flag', '/d/a/done.flag')).toBe(true);
    expect(matchesGlob('/d/**/done.flag', '/d/a/b/done.flag')).toBe(false);
    // Inside a longer segment ** is always *.
    expect(matchesGlob('/d/a**/x', '/d/a/b/x', options)).toBe(false);
    expect(globToRegExp('/d/a**b', options).test('/d/axyzb')).toBe(true);
  });
});

describe('hasMagic / splitGlob', () => {
  it('finds the literal base directory', () => {
    expect(hasMagic('/data/in/x.csv')).toBe(false);
    expect(hasMagic('/data/in/*.csv')).toBe(true);
    expect(hasMagic('/data/[ab]/x')).toBe(true);
    expect(splitGlob('/data/in/*.csv')).toEqual({ base: '/data/in', segments: ['*.csv'] });
    expect(splitGlob('/data/**/x/*.csv')).toEqual({ base: '/data', segments: ['**', 'x', '*.csv'] });
    expect(splitGlob('/data/**/**/x', { recursive: true })).toEqual({ base: '/data', segments: ['**', 'x'] });
    expect(splitGlob('/*.csv')).toEqual({ base: '/', segments: ['*.csv'] });
    expect(splitGlob('/data//in/./x.csv')).toEqual({ base: '/data/in/x.csv', segments: [] });
  });
});

describe('findFirstFile', () => {
  let root: string;

  beforeAll(async () => {
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-glob-'));
    const files = [
      'in/b.csv',
      'in/a.csv',
      'in/notes.txt',
      'in/.hidden.csv',
      'deep/one/two/done.flag',
      'deep/one/done.flag.tmp',
      'deep/.git/x/done.flag',
      'other/big/tree/file.txt',
    ];
    for (const file of files) {
      await fs.mkdir(path.dirname(path.join(root, file)), { recursive: true });
      await fs.writeFile(path.join(root, file), 'x');
    }
    await fs.mkdir(path.join(root, 'dirs/only.csv'), { recursive: true }); // a directory, not a file
  });

  afterAll(async () => {
    await fs.rm(root, { recursive: true, force: true });
  });

  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('returns the first match in name order, skipping dot-files and non-matches', async () => {
    expect(await findFirstFile(path.join(root, 'in/*.csv'))).toBe(path.join(root, 'in/a.csv'));
    expect(await findFirstFile(path.join(root, 'in/*.json'))).toBeUndefined();
    expect(await findFirstFile(path.join(root, 'in/.*.csv'))).toBe(path.join(root, 'in/.hidden.csv'));
  });

  it('matches regular files only', async () => {
    expect(await findFirstFile(path.join(root, 'dirs/*.csv'))).toBeUndefined();
    expect(await findFirstFile(path.join(root, 'dirs/only.csv'))).toBeUndefined();
    expect(await findFirstFile(path.join(root, 'in/a.csv'))).toBe(path.join(root, 'in/a.csv'));
  });

  it('walks a tree for ** when recursive, outside dot-directories', async () => {
    const pattern = path.join(root, 'deep/**/done.flag');
    expect(await findFirstFile(pattern, { recursive: true })).toBe(path.join(root, 'deep/one/two/done.flag'));
    expect(await findFirstFile(pattern)).toBeUndefined(); // ** is * without recursive
    expect(await findFirstFile(path.join(root, 'deep/*/*/done.flag'))).toBe(path.join(root, 'deep/one/two/done.flag'));
    expect(await findFirstFile(path.join(root, 'deep/**'), { recursive: true })).toBe(path.join(root, 'deep/one/done.flag.tmp'));
  });

  it('finds the first match in name order under **, beyond one batch of folders read at once', async () => {
    const wide = path.join(root, 'wide');
    // 70 folders (more than two batches); matches in folder 40 (deep) and 41, 69 (shallow).
    for (let i = 0; i < 70; i++) await fs.mkdir(path.join(wide, `f${String(i).padStart(2, '0')}`, 'sub'), { recursive: true });
    await fs.writeFile(path.join(wide, 'f40/sub/x.flag'), '');
    await fs.writeFile(path.join(wide, 'f41/x.flag'), '');
    await fs.writeFile(path.join(wide, 'f69/x.flag'), '');
    expect(await findFirstFile(path.join(wide, '**/x.flag'), { recursive: true })).toBe(path.join(wide, 'f40/sub/x.flag'));
    await fs.rm(path.join(wide, 'f40/sub/x.flag'));
    expect(await findFirstFile(path.join(wide, '**/x.flag'), { recursive: true })).toBe(path.join(wide, 'f41/x.flag'));
    expect(await findFirstFile(path.join(wide, '**/none.flag'), { recursive: true })).toBeUndefined();
  });

  it('treats a missing directory as no match', async () => {
    expect(await findFirstFile(path.join(root, 'missing/**/x'), { recursive: true })).toBeUndefined();
    expect(await findFirstFile(path.join(root, 'in/a.csv/*'))).toBeUndefined();
  });

  it('reads only the directories the pattern needs', async () => {
    const readdir = vi.spyOn(fs, 'readdir');
    await findFirstFile(path.join(root, 'in/*.csv'));
    expect(readdir.mock.calls.map((call) => call[0])).toEqual([path.join(root, 'in')]);

    readdir.mockClear();
    await findFirstFile(path.join(root, '*/one/two/done.flag'));
    expect(readdir.mock.calls.map((call) => call[0])).toEqual([root]);

    readdir.mockClear();
    await findFirstFile(path.join(root, 'deep/**/nothing.here'), { recursive: true });
    const read = readdir.mock.calls.map((call) => path.relative(root, String(call[0])));
    expect(read.every((dir) => dir.startsWith('deep'))).toBe(true);
    expect(read).not.toContain(path.join('deep', '.git'));
  });

  it('refuses a relative pattern', async () => {
    await expect(findFirstFile('in/*.csv')).rejects.toMatchObject({
      code: 'DF_INVALID_TRIGGER_ARGUMENT',
      message: expect.stringContaining('findFirstFile needs an absolute pattern'),
    });
  });
});
