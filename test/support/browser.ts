/**
 * A headless Chromium for tests that look at the status page as a person would: the system's
 * (/usr/bin/chromium) when the machine has one, else the build @sparticuz/chromium ships inside
 * its npm package, so the test runs on a fresh machine with nothing but `npm install`.
 */
import { existsSync } from 'node:fs';
import sparticuz from '@sparticuz/chromium';
import { chromium, type Browser } from 'playwright-core';

const SYSTEM_CHROMIUM = '/usr/bin/chromium';
/** This machine has no network but the package registries: Chromium must not go looking. */
const QUIET = ['--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-gpu', '--no-sandbox'];

export async function launchBrowser(): Promise<Browser> {
  if (existsSync(SYSTEM_CHROMIUM)) return chromium.launch({ executablePath: SYSTEM_CHROMIUM, args: QUIET });
  // Its arguments are made for AWS Lambda: --single-process ends the browser with its last page.
  const args = sparticuz.args.filter((arg) => arg !== '--single-process');
  return chromium.launch({ executablePath: await sparticuz.executablePath(), args: [...args, ...QUIET] });
}
