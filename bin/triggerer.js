#!/usr/bin/env node
// `triggerer ARGS` is `deferflow triggerer ARGS` (see deferflow.js).
import { register as registerCommonJs } from 'tsx/cjs/api';
import { register } from 'tsx/esm/api';

register();
registerCommonJs();
const { main } = await import('../dist/src/cli/main.js');
await main(['triggerer', ...process.argv.slice(2)]);
