// Keeps the better-sqlite3 binary this install built where its installer looks for one it
// downloaded before: prebuild-install's cache in npm's cache folder (~/.npm/_prebuilds), under the
// name it gives the download for this version, Node ABI and platform.
//
// Why: online, better-sqlite3's install downloads a prebuilt binary in a second or two and keeps
// it in that cache. The CI machine has no internet, so each clean `npm ci` compiled SQLite from
// source instead: about 85 s of CPU, most of the install. With the binary kept, the next install
// on this machine takes it from the cache as it would take a download: the same file, for the same
// version, ABI and platform. A new version or Node misses the cache and builds from source again.
// Nothing here changes what a user's install does.
const { existsSync, mkdirSync } = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const module_ = path.join(__dirname, '..', 'node_modules', 'better-sqlite3');
const binary = path.join(module_, 'build', 'Release', 'better_sqlite3.node');
if (!existsSync(binary)) process.exit(0);

const from = (request) => require(require.resolve(request, { paths: [module_] }));
const pkg = require(path.join(module_, 'package.json'));
const util = from('prebuild-install/util');
const options = { ...from('prebuild-install/rc')(pkg), pkg };
const cached = util.cachedPrebuild(util.getDownloadUrl(options));
if (existsSync(cached)) process.exit(0);

mkdirSync(path.dirname(cached), { recursive: true });
const partial = `${cached}.${process.pid}.tmp`;
execFileSync('tar', ['-czf', partial, 'build/Release/better_sqlite3.node'], { cwd: module_ });
require('node:fs').renameSync(partial, cached);
console.log(`kept the better-sqlite3 build as ${cached}`);
