import { readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface OwnPackage {
  readonly version: string;
  readonly devDependencies?: Readonly<Record<string, string>>;
}

let cached: { manifest: OwnPackage; root: string | null } | undefined;

/** deferflow's own package.json and the folder it is in: the nearest above this file named deferflow (src/cli in a checkout, dist/src/cli installed). */
function findOwnPackage(): { manifest: OwnPackage; root: string | null } {
  if (cached) return cached;
  for (let dir = new URL('.', import.meta.url); ; dir = new URL('..', dir)) {
    try {
      const manifest = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8')) as OwnPackage & { name?: string };
      if (manifest.name === 'deferflow') {
        cached = { manifest, root: fileURLToPath(dir) };
        return cached;
      }
    } catch {
      // none here: look higher
    }
    if (dir.pathname === '/') {
      cached = { manifest: { version: 'unknown' }, root: null };
      return cached;
    }
  }
}

/** deferflow's own package.json. */
export function ownPackage(): OwnPackage {
  return findOwnPackage().manifest;
}

/**
 * Where the deferflow running this came from, as a project's package.json would name it:
 * - `registry`: installed from the npm registry (spec null: a version range of it);
 * - `folder`: not inside a node_modules folder (a checkout run as `node <checkout>/bin/deferflow.js`,
 *   or linked there by `npm install <folder>` or `npx --package <folder>`): `file:<folder>`;
 * - `installed`: installed from a tarball (a path or a URL) or a git URL: what npm's lockfile beside its
 *   node_modules says it resolved (`file:` paths made absolute);
 * - `unknown`: inside node_modules with no lockfile entry to tell.
 */
export type InstallationSource =
  | { readonly kind: 'registry'; readonly spec: null }
  | { readonly kind: 'folder' | 'installed'; readonly spec: string }
  | { readonly kind: 'unknown'; readonly spec: null };

export function installationSource(): InstallationSource {
  const { root } = findOwnPackage();
  if (root === null) return { kind: 'unknown', spec: null };
  const real = realpathSync(root);
  const segments = real.split(path.sep);
  const last = segments.lastIndexOf('node_modules');
  if (last < 0) return { kind: 'folder', spec: `file:${real.replace(/[/\\]$/, '')}` };
  const projectRoot = segments.slice(0, last).join(path.sep) || path.sep;
  const key = segments.slice(last).filter(Boolean).join('/');
  // npm (7+) keeps a hidden lockfile in node_modules, the project's own beside it.
  for (const lockfile of [path.join(projectRoot, 'node_modules', '.package-lock.json'), path.join(projectRoot, 'package-lock.json')]) {
    let resolved: unknown;
    try {
      const lock = JSON.parse(readFileSync(lockfile, 'utf8')) as { packages?: Record<string, { resolved?: unknown }> };
      resolved = lock.packages?.[key]?.resolved;
    } catch {
      continue;
    }
    if (typeof resolved !== 'string') continue;
    // A registry's tarballs are at <registry>/deferflow/-/deferflow-<version>.tgz; any other URL is a tarball of its own.
    if (/^https?:.*\/-\/deferflow-[^/]+\.tgz$/.test(resolved)) return { kind: 'registry', spec: null };
    if (resolved.startsWith('file:')) return { kind: 'installed', spec: `file:${path.resolve(projectRoot, resolved.slice('file:'.length))}` };
    return { kind: 'installed', spec: resolved };
  }
  return { kind: 'unknown', spec: null };
}
