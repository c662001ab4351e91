import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { mkdirSync } from 'node:fs';
import { type Browser, chromium, type Page } from 'playwright-core';
import { AppModule } from '../apps/demo/src/app.module.js';
import { readDemoConfig } from '../apps/demo/src/demo.config.js';
import { findChromium } from './support/chromium.js';
import { useRedisServer } from './support/redis-server.js';

const ARTIFACTS = 'test-artifacts';

/** A person at the demo page: fire the stampede with the lock on, then off, and read the result. */
/** Stopped after the demo app below has closed: Jest runs an inner block's afterAll hooks first. */
const server = useRedisServer();

describe('the demo page in a browser', () => {
  let app: INestApplication;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    const module = await Test.createTestingModule({
      // A slow backend (1 s): without the lock every request has missed before the first load fills the cache.
      imports: [AppModule.register(readDemoConfig({ REDIS_URL: server().url, BACKEND_LATENCY_MS: '1000' }))],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    browser = await chromium.launch(await findChromium());
    page = await browser.newPage({ viewport: { width: 800, height: 640 } });
    await page.goto(await app.getUrl());
    mkdirSync(ARTIFACTS, { recursive: true });
  });
  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  const panel = (lock: 'on' | 'off' | 'single-flight') => page.locator(`#panel-${lock}`);
  const backendCalls = async (lock: 'on' | 'off' | 'single-flight') =>
    Number(await panel(lock).locator('.backend-calls').textContent());
  const runsShown = () => page.locator('#history tbody tr').count();

  /** Clicks `button` and waits until the history holds `runs` rows. */
  async function fire(button: '#fire' | '#fire-both' | '#fire-all', runs: number, screenshot: string): Promise<void> {
    await page.locator(button).click();
    await page
      .locator('#history tbody tr')
      .nth(runs - 1)
      .waitFor({ timeout: 20_000 });
    await page.screenshot({ path: `${ARTIFACTS}/demo-page-${screenshot}.png`, fullPage: true });
  }

  it('labels the lock switch as it stands', async () => {
    expect(await page.locator('#lock-label').textContent()).toBe('lock on');
    await page.locator('#lock').setChecked(false);
    expect(await page.locator('#lock-label').textContent()).toBe('lock off');
    await page.locator('#lock').setChecked(true);
    expect(await page.locator('#lock-label').textContent()).toBe('lock on');
  });

  it('shows 1 backend call with the lock on, then more than 1 with it off, side by side', async () => {
    await page.locator('#lock').setChecked(true);
    await fire('#fire', 1, 'lock-on');

    expect(await backendCalls('on')).toBe(1);
    expect(await panel('on').locator('.statuses').textContent()).toBe('100×200');
    expect(await panel('on').locator('svg rect').count()).toBeGreaterThan(0);
    expect(await panel('off').locator('.backend-calls').textContent()).toBe('–');

    await page.locator('#lock').setChecked(false);
    expect(await page.locator('#lock-label').textContent()).toBe('lock off');
    await fire('#fire', 2, 'lock-off');

    expect(await backendCalls('off')).toBeGreaterThan(1);
    expect(await panel('off').locator('.statuses').textContent()).toBe('100×200');
    expect(await panel('off').locator('svg rect').count()).toBeGreaterThan(0);
    // The earlier run stays in its panel.
    expect(await backendCalls('on')).toBe(1);
  });

  it('fires both modes at once and keeps the earlier runs in the history', async () => {
    const before = await runsShown();
    await fire('#fire-both', before + 2, 'both');

    expect(await backendCalls('on')).toBe(1);
    expect(await backendCalls('off')).toBeGreaterThan(1);
    const newest = await page.locator('#history tbody tr td:first-child').allTextContents();
    expect(newest.slice(0, 2)).toEqual(['lock off', 'lock on']);
    expect(await page.locator('#spread-control').isHidden()).toBe(true);
  });

  it('fires the three ways: single-flight makes 1 backend call, with its Redis commands per request shown', async () => {
    const before = await runsShown();
    await fire('#fire-all', before + 3, 'all-three');

    expect(await backendCalls('single-flight')).toBe(1);
    expect(await panel('single-flight').locator('.statuses').textContent()).toBe('100×200');
    const commands = async (lock: 'on' | 'single-flight') =>
      Number(await panel(lock).locator('.commands').textContent());
    expect(await commands('single-flight')).toBeLessThan(await commands('on'));
    const newest = await page.locator('#history tbody tr td:first-child').allTextContents();
    expect(newest.slice(0, 3)).toEqual(['single-flight', 'lock off', 'lock on']);
  });

  it('shows the leader, its term, and the leader-only job run by it beside the skip-when-busy one', async () => {
    // One process: it leads, and runs every firing of both jobs.
    await page.locator('#report-runs tbody tr').first().waitFor({ timeout: 10_000 });
    await page.locator('#job-runs tbody tr').first().waitFor({ timeout: 10_000 });
    const term = await page.locator('#leader-term').textContent();
    expect(Number(term)).toBeGreaterThan(0);
    expect(await page.locator('#leader-here').textContent()).toMatch(/^pid \d+ \(port \d+\), the leader$/);
    const [, by, runTerm] = await page.locator('#report-runs tbody tr').first().locator('td').allTextContents();
    expect([by, runTerm]).toEqual([await page.locator('#leader-by').textContent(), term]);
    await page.screenshot({ path: `${ARTIFACTS}/demo-page-leader.png`, fullPage: true });
  });
});
