#!/usr/bin/env node
// `triggerer ARGS` is `deferflow triggerer ARGS` (see deferflow.js).
const { main } = await import('../dist/src/bundle/cli.js');
await main(['triggerer', ...process.argv.slice(2)]);
