/**
 * A small glob matcher for FileTrigger (Node 20 has no fs.glob). Patterns are '/'-separated paths
 * (on Windows '\' separates too) whose segments may hold:
 *
 * - `*`      any run of characters within one segment, `?` one character;
 * - `[abc]`, `[a-z]`, `[!abc]` / `[^abc]` one character from (or not from) a set; a `[` with no
 *   closing `]` is literal, and `[[]`, `[*]`, `[?]` match the literal character;
 * - `**`     as a whole segment, with `recursive: true`: zero or more directories. Otherwise (and
 *   always inside a longer segment) it is just `*`, as in Python's glob without recursive=True.
 *
 * Like Python's glob and most shells, wildcards do not match a name starting with `.` unless the
 * segment itself starts with a literal `.`, and `**` does not descend into dot-directories or
 * through symbolic links to directories (no cycles). Matching is case-sensitive.
 *
 * The walker reads only the directories a pattern needs: the literal leading directories are
 * joined without reading anything, a literal segment further in is joined too, a wildcard segment
 * reads its one directory, and only `**` (recursive) reads a tree.
 */
import type { Dirent } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';

export interface GlobOptions {
  /** `**` as a whole segment matches zero or more directories. Default false (`**` is `*`). */
  readonly recursive?: boolean;
}

const SEPARATORS = path.sep === '\\' ? /[\\/]/ : /\//;

/** Whether a pattern (or one segment) holds a wildcard; a pattern without one is a plain path. */
export function hasMagic(pattern: string): boolean {
  return /[*?[]/.test(pattern);
}

/**
 * A RegExp for one path segment (a file or directory name). Throws a SyntaxError for a set that
 * is not a valid character range (e.g. `[z-a]`).
 */
export function segmentToRegExp(segment: string): RegExp {
  return new RegExp(`^${segmentSource(segment)}$`, 'u');
}

/** A RegExp for a whole '/'-separated path, with the same rules the walker applies. */
export function globToRegExp(pattern: string, options: GlobOptions = {}): RegExp {
  const segments = collapseGlobstars(pattern.split(SEPARATORS), options);
  let source = '';
  segments.forEach((segment, i) => {
    const last = i === segments.length - 1;
    if (options.recursive && segment === '**') {
      source += last ? '(?!\\.)[^/]+(?:/(?!\\.)[^/]+)*' : '(?:(?!\\.)[^/]+/)*';
      return;
    }
    source += segmentSource(segment) + (last ? '' : '/');
  });
  return new RegExp(`^${source}$`, 'u');
}

/** Whether `filePath` matches `pattern` (both '/'-separated, compared as given). */
export function matchesGlob(pattern: string, filePath: string, options: GlobOptions = {}): boolean {
  return globToRegExp(pattern, options).test(filePath.split(SEPARATORS).join('/'));
}

/**
 * Splits an absolute pattern into the literal directory it starts from and the segments after
 * it, from the first one with a wildcard: "/data/in/*.csv" → { base: "/data/in", segments: ["*.csv"] }.
 * A pattern without wildcards gives no segments (base is the whole, normalized path).
 */
export function splitGlob(pattern: string, options: GlobOptions = {}): { base: string; segments: string[] } {
  const { root } = path.parse(pattern);
  const parts = pattern
    .slice(root.length)
    .split(SEPARATORS)
    .filter((part) => part !== '' && part !== '.');
  const firstMagic = parts.findIndex(hasMagic);
  if (firstMagic === -1) return { base: path.join(root, ...parts), segments: [] };
  return { base: path.join(root, ...parts.slice(0, firstMagic)), segments: collapseGlobstars(parts.slice(firstMagic), options) };
}

/**
 * The first regular file (or symbolic link to one) matching an absolute pattern, in name order
 * within each directory, or undefined. Missing directories are no match (they may appear later);
 * other I/O errors are thrown, except permission errors inside a `**` walk, which skip that
 * directory.
 */
export async function findFirstFile(pattern: string, options: GlobOptions = {}): Promise<string | undefined> {
  if (!path.isAbsolute(pattern))
    throw new InvalidTriggerArgumentError('FileTrigger', `findFirstFile needs an absolute pattern, got ${JSON.stringify(pattern)}`);
  const { base, segments } = splitGlob(pattern, options);
  if (segments.length === 0) return (await isRegularFile(base)) ? base : undefined;
  // Compile each wildcard segment once per call (a globstar needs none).
  const regexps = segments.map((segment) => ((options.recursive && segment === '**') || !hasMagic(segment) ? null : segmentToRegExp(segment)));
  return walk(base, segments, regexps, 0, false);
}

async function walk(
  dir: string,
  segments: readonly string[],
  regexps: readonly (RegExp | null)[],
  index: number,
  insideGlobstar: boolean,
): Promise<string | undefined> {
  const segment = segments[index]!;
  const regexp = regexps[index]!;
  const last = index === segments.length - 1;

  if (regexp === null && segment !== '**') {
    // A literal segment: no directory read.
    const next = path.join(dir, segment);
    if (last) return (await isRegularFile(next)) ? next : undefined;
    return walk(next, segments, regexps, index + 1, insideGlobstar);
  }

  const entries = await readDir(dir, insideGlobstar);
  if (regexp === null) {
    // `**` (recursive): zero directories here, then each non-dot real subdirectory, depth first.
    if (last) {
      for (const entry of entries) {
        if (entry.name.startsWith('.')) continue;
        const full = path.join(dir, entry.name);
        if (await isFileEntry(entry, full)) return full;
      }
    } else {
      const found = await walk(dir, segments, regexps, index + 1, true);
      if (found !== undefined) return found;
    }
    // Subdirectories in name order, a batch at a time read concurrently: a poke that finds
    // nothing (the usual one) is not a sequence of one read after another, and a match early in
    // the tree still ends the walk there (see bench/glob-bench.ts).
    const subdirectories = entries.filter((entry) => entry.isDirectory() && !entry.name.startsWith('.'));
    for (let start = 0; start < subdirectories.length; start += GLOBSTAR_BATCH) {
      const batch = subdirectories.slice(start, start + GLOBSTAR_BATCH);
      const found = await Promise.all(batch.map((entry) => walk(path.join(dir, entry.name), segments, regexps, index, true)));
      const first = found.find((file) => file !== undefined);
      if (first !== undefined) return first;
    }
    return undefined;
  }

  for (const entry of entries) {
    if (!regexp.test(entry.name)) continue;
    const full = path.join(dir, entry.name);
    if (last) {
      if (await isFileEntry(entry, full)) return full;
    } else if (await isDirectoryEntry(entry, full)) {
      const found = await walk(full, segments, regexps, index + 1, insideGlobstar);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

/** Subdirectories a `**` walk reads at once. */
const GLOBSTAR_BATCH = 32;

async function readDir(dir: string, insideGlobstar: boolean): Promise<Dirent[]> {
  try {
    const entries = await fs.readdir(dir, { withFileTypes: true });
    return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    if (insideGlobstar && (code === 'EACCES' || code === 'EPERM')) return [];
    throw error;
  }
}

async function isFileEntry(entry: Dirent, full: string): Promise<boolean> {
  if (entry.isFile()) return true;
  return entry.isSymbolicLink() ? isRegularFile(full) : false;
}

async function isDirectoryEntry(entry: Dirent, full: string): Promise<boolean> {
  if (entry.isDirectory()) return true;
  if (!entry.isSymbolicLink()) return false;
  const stats = await statOrUndefined(full);
  return stats?.isDirectory() ?? false;
}

/** Whether `file` is a regular file (following symbolic links); missing → false. */
export async function isRegularFile(file: string): Promise<boolean> {
  const stats = await statOrUndefined(file);
  return stats?.isFile() ?? false;
}

async function statOrUndefined(file: string) {
  try {
    return await fs.stat(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') return undefined;
    throw error;
  }
}

function collapseGlobstars(segments: string[], options: GlobOptions): string[] {
  if (!options.recursive) return segments;
  return segments.filter((segment, i) => !(segment === '**' && segments[i - 1] === '**'));
}

const REGEXP_SPECIAL = /[\\^$.*+?()[\]{}|]/g;
const CLASS_SPECIAL = /[\\\][^]/g;

function segmentSource(segment: string): string {
  let source = '';
  let i = 0;
  while (i < segment.length) {
    const char = segment[i]!;
    if (char === '*') {
      while (segment[i] === '*') i++;
      source += '[^/]*';
      continue;
    }
    if (char === '?') {
      source += '[^/]';
      i++;
      continue;
    }
    if (char === '[') {
      const set = readSet(segment, i);
      if (set !== undefined) {
        source += set.source;
        i = set.end;
        continue;
      }
    }
    source += char.replace(REGEXP_SPECIAL, '\\$&');
    i++;
  }
  // Wildcards do not match a leading dot unless the segment asks for one.
  return hasMagic(segment) && !segment.startsWith('.') ? `(?!\\.)${source}` : source;
}

/** The regexp of the set starting at segment[start] ('['), or undefined when it is not closed. */
function readSet(segment: string, start: number): { source: string; end: number } | undefined {
  let i = start + 1;
  let negated = false;
  if (segment[i] === '!' || segment[i] === '^') {
    negated = true;
    i++;
  }
  const bodyStart = i;
  if (segment[i] === ']') i++; // a leading ']' is a member
  while (i < segment.length && segment[i] !== ']') i++;
  if (i >= segment.length) return undefined;
  const body = segment.slice(bodyStart, i).replace(CLASS_SPECIAL, '\\$&');
  return { source: negated ? `[^/${body}]` : `[${body}]`, end: i + 1 };
}
