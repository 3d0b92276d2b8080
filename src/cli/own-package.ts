import { readFileSync } from 'node:fs';

export interface OwnPackage {
  readonly version: string;
  readonly devDependencies?: Readonly<Record<string, string>>;
}

let cached: OwnPackage | undefined;

/** deferflow's own package.json: the nearest one above this file named deferflow (src/cli in a checkout, dist/src/cli installed). */
export function ownPackage(): OwnPackage {
  if (cached) return cached;
  for (let dir = new URL('.', import.meta.url); ; dir = new URL('..', dir)) {
    try {
      const manifest = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8')) as OwnPackage & { name?: string };
      if (manifest.name === 'deferflow') {
        cached = manifest;
        return cached;
      }
    } catch {
      // none here: look higher
    }
    if (dir.pathname === '/') {
      cached = { version: 'unknown' };
      return cached;
    }
  }
}
