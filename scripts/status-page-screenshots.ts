/**
 * The README's screenshots of the status page: `npm run screenshots` runs the `npm start` demo
 * (200 deferred tasks) in standalone, its daemons sampling their figures every second, and a
 * headless Chromium (the one the browser test uses) photographs the deferred task instances
 * page, a DAG page, the daemons page and, once the run is done, the charts and a resumed task
 * instance's page as an operator sees it (with its actions) into docs/.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { launchBrowser } from '../test/support/browser.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-screenshots-'));
const OPERATOR_TOKEN = 'screenshots-operator-token-0123456789';
const standalone = spawn(
  process.execPath,
  [
    path.join(root, 'bin/deferflow.js'),
    'standalone',
    ...['--db', `sqlite:${path.join(scratch, 'demo.db')}`, '--dags', 'examples/dags', '--trigger-dag', 'deferral_demo', '--concurrency', '4'],
    ...['--http-port', '0', '--web-refresh', '0', '--sample-interval', '1'],
  ],
  { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, DEFERFLOW_WEB_OPERATOR_TOKEN: OPERATOR_TOKEN } },
);
const browser = await launchBrowser();
try {
  const base = await new Promise<string>((resolve, reject) => {
    readline.createInterface({ input: standalone.stdout! }).on('line', (line) => {
      if (line.startsWith('status page: ')) resolve(line.slice('status page: '.length).replace(/\/$/, ''));
    });
    standalone.once('exit', (code) => reject(new Error(`standalone exited ${code}`)));
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  // Every task deferred: the demo defers all 200 within a few seconds.
  for (let i = 0; i < 100; i++) {
    await page.goto(`${base}/deferred`);
    if ((await page.locator('h1').textContent())?.includes('(200)')) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await page.screenshot({ path: path.join(root, 'docs/status-deferred.png') });
  await page.goto(`${base}/dags/streaming_demo`);
  await page.screenshot({ path: path.join(root, 'docs/status-dag.png') });
  await page.goto(`${base}/daemons`);
  await page.screenshot({ path: path.join(root, 'docs/status-daemons.png') });
  // The run done (a 10 s wait): one of its task instances, resumed by its trigger's event.
  for (let i = 0; i < 300; i++) {
    await page.goto(`${base}/dags/deferral_demo`);
    if ((await page.locator('#runs .state-success').count()) > 0) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await page.goto(`${base}/charts?hours=0.25`);
  await page.screenshot({ path: path.join(root, 'docs/status-charts.png'), fullPage: true });
  const operator = await browser.newContext({ viewport: { width: 1280, height: 720 }, httpCredentials: { username: 'alice', password: OPERATOR_TOKEN } });
  const operatorPage = await operator.newPage();
  await operatorPage.goto(`${base}/sign-in`);
  await operatorPage.goto(`${base}/dags/deferral_demo`);
  await operatorPage.locator('#grid a.cell[data-state="success"]').first().click();
  await operatorPage.locator('#return-value').waitFor();
  await operatorPage.screenshot({ path: path.join(root, 'docs/status-task-instance.png') });
  process.stdout.write('wrote docs/status-deferred.png, status-dag.png, status-daemons.png, status-charts.png and status-task-instance.png\n');
} finally {
  await browser.close();
  standalone.kill('SIGTERM');
  await new Promise((resolve) => standalone.once('exit', resolve));
  rmSync(scratch, { recursive: true, force: true });
}
