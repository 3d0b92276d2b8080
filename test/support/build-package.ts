/**
 * vitest globalSetup: compiles the package (`npm run build`, src/ → dist/) before any test runs,
 * so every spawned `deferflow` process runs the code under test, never a stale build. A build is
 * kept when each source file (src/, triggers/, migrations/) has its compiled file and every one
 * of those was written after the newest source file, tsconfig and package.json: compiling takes
 * seconds (17 here, before any test may start), and neither a run of a few tests nor a clean
 * install (whose `prepare` has just built the package) should pay them again.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export default function setup(): void {
  if (builtSinceLastChange()) return;
  try {
    execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.build.json')], {
      cwd: root,
      stdio: 'pipe',
    });
  } catch (error) {
    const output = (error as { stdout?: Buffer }).stdout?.toString() ?? '';
    throw new Error(`building the package (tsc -p tsconfig.build.json) failed:\n${output}`);
  }
}

/**
 * Whether dist/ holds a compiled file for every source, each written after the last change to
 * any input. tsc writes every output on each build, so one older output means a build is due.
 */
function builtSinceLastChange(): boolean {
  const sources = ['src', 'triggers', 'migrations'].flatMap((dir) =>
    readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts') && (dir !== 'migrations' || !file.includes(path.sep)))
      .map((file) => path.join(dir, file)),
  );
  const inputs = [...sources, 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
  const lastChange = Math.max(...inputs.map((file) => statSync(path.join(root, file)).mtimeMs));
  return sources.every((file) => {
    const output = path.join(root, 'dist', file.replace(/\.ts$/, '.js'));
    return existsSync(output) && statSync(output).mtimeMs > lastChange;
  });
}
