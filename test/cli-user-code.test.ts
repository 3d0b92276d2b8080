// Users' own files that cannot load as they are: the error names the file and says what to do.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases } from './support/databases.ts';
import { processScratch } from './support/process-scratch.ts';
import { PACKAGE_ENTRY, spawnDeferflow, spawnTriggerer } from './support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

// TypeScript syntax (a type-only import) that CommonJS cannot read.
const ESM_TS = `import { BaseOperator, Dag, type RuntimeContext } from ${JSON.stringify(PACKAGE_ENTRY)};
class Step extends BaseOperator<RuntimeContext> { execute() { return 1; } }
export const dag = new Dag({ dagId: 'esm_in_commonjs' }).add(new Step({ taskId: 'step' }));
`;

describe('user files that cannot load as they are', () => {
  it('a .ts file outside an ESM package, and a file whose project lacks deferflow, are reported with the fix', async () => {
    const db = await scratch.database('sqlite');
    // A folder under the system temp directory: no package.json above it.
    const dir = scratch.dir('user-code');
    writeFileSync(path.join(dir, 'commonjs.ts'), ESM_TS);
    writeFileSync(path.join(dir, 'uninstalled.mts'), `import { Dag } from 'deferflow';\nexport const dag = new Dag({ dagId: 'uninstalled' });\n`);
    // Run from the user's folder, as they would: from the repository, tsx would map 'deferflow' through its tsconfig.json.
    const reserialize = spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dir], {}, dir);
    expect((await reserialize.exit).code).toBe(1);
    const out = reserialize.text.join('\n');
    expect(out).toContain(`${path.join(dir, 'commonjs.ts')} is read as CommonJS: no package.json above it says "type": "module"; rename it .mts (.mjs), or run \`npm init -y && npm pkg set type=module\``);
    expect(out).toContain(`deferflow is not installed where uninstalled.mts can find it: run \`npm install deferflow\` in the project that holds ${path.join(dir, 'uninstalled.mts')}`);

    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'commonjs-project' }));
    const trigger = path.join(dir, 'trigger.ts');
    writeFileSync(trigger, `import { BaseTrigger, type SerializedTrigger } from ${JSON.stringify(PACKAGE_ENTRY)};\nexport class T extends BaseTrigger { serialize(): SerializedTrigger { return { classpath: 'T', kwargs: {} }; } async *run() {} }\n`);
    const triggerer = spawnTriggerer(['--db', db.url, '--trigger-module', trigger]);
    expect((await triggerer.exit).code).toBe(2);
    expect(triggerer.stderr.join('\n')).toContain(`error [DF_TRIGGER_MODULE]: trigger module ${JSON.stringify(trigger)} could not be loaded`);
    expect(triggerer.stderr.join('\n')).toContain(`${trigger} is read as CommonJS: ${path.join(dir, 'package.json')} has no "type": "module"; rename it .mts (.mjs), or run \`npm pkg set type=module\` there`);
  }, 60_000);
});
