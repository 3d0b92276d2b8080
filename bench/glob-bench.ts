// FileTrigger's glob: deferflow's own walker and matcher (triggers/glob.ts) against tinyglobby
// (fdir + picomatch), on what a FileTrigger poke does: find the first file a pattern matches.
// Prints one JSON line per scenario, then where picomatch matches a segment differently from
// Python's glob (which FileTrigger follows, as Airflow's FileSensor does).
//
//   npm run bench:glob
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import picomatch from 'picomatch';
import { glob } from 'tinyglobby';
import { findFirstFile, segmentToRegExp } from '../triggers/glob.ts';

const root = mkdtempSync(path.join(os.tmpdir(), 'deferflow-glob-bench-'));
try {
  // A landing folder of 20,000 files, one of them the .csv waited for.
  mkdirSync(path.join(root, 'in'));
  for (let i = 0; i < 20_000; i++) writeFileSync(path.join(root, 'in', `part-${String(i).padStart(5, '0')}.tmp`), '');
  writeFileSync(path.join(root, 'in', 'part-19999.csv'), '');
  // A tree of 400 folders x 50 files, the flag in the tenth folder.
  for (let d = 0; d < 400; d++) {
    const dir = path.join(root, 'tree', `day-${String(d).padStart(3, '0')}`, 'out');
    mkdirSync(dir, { recursive: true });
    for (let f = 0; f < 50; f++) writeFileSync(path.join(dir, `f${f}.json`), '');
    if (d === 9) writeFileSync(path.join(dir, '_SUCCESS'), '');
  }

  const scenarios = [
    { name: 'one folder of 20,000 files, *.csv', pattern: path.join(root, 'in', '*.csv'), recursive: false },
    { name: '400 folders x 50 files, **/_SUCCESS (found in the 10th)', pattern: path.join(root, 'tree', '**', '_SUCCESS'), recursive: true },
    { name: '400 folders x 50 files, **/missing (no match: whole tree)', pattern: path.join(root, 'tree', '**', 'missing'), recursive: true },
  ];
  for (const scenario of scenarios) {
    const ours = await timed(() => findFirstFile(scenario.pattern, { recursive: scenario.recursive }));
    const tiny = await timed(
      async () => (await glob(scenario.pattern, { onlyFiles: true, dot: false, followSymbolicLinks: false, expandDirectories: false }))[0],
    );
    console.log(
      JSON.stringify({
        scenario: scenario.name,
        deferflow_ms: ours.ms,
        tinyglobby_ms: tiny.ms,
        same_answer: ours.found === tiny.found || (ours.found !== undefined) === (tiny.found !== undefined),
      }),
    );
  }

  // Segments where picomatch (as tinyglobby configures it, braces and extglobs off) and
  // Python's glob disagree.
  const cases: [string, string][] = [
    ['file[!a-c].log', 'filec.log'],
    ['a+b(1).txt', 'a+b(1).txt'],
    ['a\\b', 'a\\b'],
    ['?.txt', '😀.txt'],
    ['{x}.txt', '{x}.txt'],
  ];
  const differs = cases.flatMap(([pattern, name]) => {
    const python = segmentToRegExp(pattern).test(name);
    const pico = picomatch.makeRe(pattern, { dot: false, nobrace: true, noextglob: true }).test(name);
    return python === pico ? [] : [{ pattern, name, python_glob: python, picomatch: pico }];
  });
  console.log(JSON.stringify({ picomatch_differs_from_python_glob: differs }));
} finally {
  rmSync(root, { recursive: true, force: true });
}

/** Median of 15 runs, after 3 to warm up. */
async function timed(run: () => Promise<string | undefined>): Promise<{ ms: number; found: string | undefined }> {
  let found: string | undefined;
  for (let i = 0; i < 3; i++) found = await run();
  const times: number[] = [];
  for (let i = 0; i < 15; i++) {
    const start = performance.now();
    found = await run();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { ms: Number(times[7]!.toFixed(2)), found };
}
