/**
 * vitest globalSetup: builds the package (`npm run build`: scripts/build.ts) before any test runs,
 * so every spawned `deferflow` process runs the code under test, never a stale build. A build is
 * kept when each source file (src/, triggers/, migrations/) has its declaration, the bundle is
 * there, and every one of those was written after the newest source file, tsconfig, package.json
 * and build script: building takes seconds (~30 here, before any test may start), and neither a
 * run of a few tests nor a clean install (whose `prepare` has just built the package) should pay
 * them again.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUNDLE_DIR, buildPackage } from '../../scripts/build.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export default async function setup(): Promise<void> {
  if (!builtSinceLastChange()) await buildPackage();
}

/**
 * Whether dist/ holds a declaration for every source and the bundle, each written after the last
 * change to any input. A build rewrites every output, so one older output means a build is due.
 */
function builtSinceLastChange(): boolean {
  const sources = ['src', 'triggers', 'migrations'].flatMap((dir) =>
    readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts') && (dir !== 'migrations' || !file.includes(path.sep)))
      .map((file) => path.join(dir, file)),
  );
  const inputs = [...sources, 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'scripts/build.ts'];
  const lastChange = Math.max(...inputs.map((file) => statSync(path.join(root, file)).mtimeMs));
  const outputs = [...sources.map((file) => file.replace(/\.ts$/, '.d.ts')), `${BUNDLE_DIR}/cli.js`, `${BUNDLE_DIR}/task-runner-main.js`, 'src/index.js'];
  return outputs.every((file) => {
    const output = path.join(root, 'dist', file);
    return existsSync(output) && statSync(output).mtimeMs > lastChange;
  });
}
