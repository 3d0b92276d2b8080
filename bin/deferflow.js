#!/usr/bin/env node
// Runs deferflow from its compiled package (dist/). Users' own TypeScript (DAG files, trigger
// modules and what they import) loads through tsx hooks that deferflow registers when it first
// loads user code (src/authoring/user-code/typescript-hooks.ts), as it does when embedded.
const { main } = await import('../dist/src/bundle/cli.js');
await main(process.argv.slice(2));
