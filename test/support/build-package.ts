/**
 * vitest globalSetup: compiles the package (`npm run build`, src/ → dist/) before any test runs,
 * so every spawned `deferflow` process runs the code under test, never a stale build. A build no
 * source file (src/, triggers/, migrations/, the tsconfigs) is newer than is kept: compiling
 * takes seconds, and a run of a few tests should not pay them each time.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** Written after each build that succeeded: its mtime is when the build started. */
const STAMP = path.join(root, 'dist', '.build-stamp');

export default function setup(): void {
  if (builtSinceLastChange()) return;
  const started = new Date();
  try {
    execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.build.json')], {
      cwd: root,
      stdio: 'pipe',
    });
  } catch (error) {
    const output = (error as { stdout?: Buffer }).stdout?.toString() ?? '';
    throw new Error(`building the package (tsc -p tsconfig.build.json) failed:\n${output}`);
  }
  writeFileSync(STAMP, started.toISOString());
  utimesSync(STAMP, started, started);
}

/** Whether the last successful build began after every source file was last written. */
function builtSinceLastChange(): boolean {
  if (!existsSync(STAMP)) return false;
  const built = statSync(STAMP).mtimeMs;
  const sources = [
    ...['src', 'triggers', 'migrations'].flatMap((dir) =>
      readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' }).map((file) => path.join(root, dir, file)),
    ),
    path.join(root, 'tsconfig.json'),
    path.join(root, 'tsconfig.build.json'),
    path.join(root, 'package.json'),
  ];
  return sources.every((file) => statSync(file).mtimeMs < built);
}
