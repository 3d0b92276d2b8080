#!/usr/bin/env node
// Runs deferflow from its compiled package (dist/). tsx is registered only so that users' own
// DAG files and trigger modules load as TypeScript (.ts, .mts) without a build step of theirs.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../dist/src/cli/main.js');
await main(process.argv.slice(2));
