/**
 * vitest globalSetup: compiles the package (`npm run build`, src/ → dist/) before any test runs,
 * so every spawned `deferflow` process runs the code under test, never a stale build.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
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
