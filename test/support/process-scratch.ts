/**
 * What a test that spawns deferflow processes sets up and must tear down: migrated databases,
 * scratch folders (a DAG folder, say) and the processes themselves.
 *
 *   const scratch = processScratch();          // at the top of the file: registers afterEach
 *   const db = await scratch.database(dialect);
 *   const dags = scratch.dir('runtime');
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach } from 'vitest';
import type { TestDialect } from './databases.ts';
import { migratedDatabase, type TestDatabase } from './fixtures.ts';
import { killLeftovers } from './processes.ts';

export function processScratch() {
  const databases: TestDatabase[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    await killLeftovers();
    await Promise.all(databases.splice(0).map((db) => db.close()));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return {
    async database(dialect: TestDialect): Promise<TestDatabase> {
      const db = await migratedDatabase(dialect);
      databases.push(db);
      return db;
    },
    dir(purpose: string): string {
      const dir = mkdtempSync(path.join(os.tmpdir(), `deferflow-${purpose}-`));
      dirs.push(dir);
      return dir;
    },
  };
}
