import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

export interface PackageManifest {
  /** The package.json's path. */
  readonly path: string;
  /** Its "type" field as written (undefined when absent or unreadable). */
  readonly type: unknown;
}

/** The package.json nearest above `dir` (Node's rule for a file's module format), or null. */
export function nearestPackageJson(dir: string): PackageManifest | null {
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    const candidate = path.join(at, 'package.json');
    if (existsSync(candidate)) {
      try {
        return { path: candidate, type: (JSON.parse(readFileSync(candidate, 'utf8')) as { type?: unknown }).type };
      } catch {
        return { path: candidate, type: undefined };
      }
    }
    if (path.dirname(at) === at) return null;
  }
}

/** How Node would read `file`: as an ES module or as CommonJS (by extension, else the nearest package.json's "type"). */
export function moduleFormatOf(file: string): 'module' | 'commonjs' {
  if (/\.m[jt]s$/.test(file)) return 'module';
  if (/\.c[jt]s$/.test(file)) return 'commonjs';
  return nearestPackageJson(path.dirname(file))?.type === 'module' ? 'module' : 'commonjs';
}
