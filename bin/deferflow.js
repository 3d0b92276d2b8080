#!/usr/bin/env node
// Runs deferflow from its compiled package (dist/). tsx is registered only so that users' own
// TypeScript (DAG files, trigger modules and what they import) loads without a build step of
// theirs: both hooks, since a user's file may be an ES module or CommonJS.
import { register as registerCommonJs } from 'tsx/cjs/api';
import { register } from 'tsx/esm/api';

register();
registerCommonJs();
const { main } = await import('../dist/src/cli/main.js');
await main(process.argv.slice(2));
