#!/usr/bin/env node
// `triggerer ARGS` is `deferflow triggerer ARGS`.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main(['triggerer', ...process.argv.slice(2)]);
