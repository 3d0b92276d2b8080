#!/usr/bin/env node
// Runs deferflow from its TypeScript sources; tsx also lets --trigger-module load .ts files
// without a build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main(process.argv.slice(2));
