import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { mkdirSync } from 'node:fs';
import { type Browser, chromium, type Page } from 'playwright-core';
import { AppModule } from '../apps/demo/src/app.module.js';
import { readDemoConfig } from '../apps/demo/src/demo.config.js';
import { findChromium } from './support/chromium.js';
import { RedisServer } from './support/redis-server.js';

const ARTIFACTS = 'test-artifacts';

/** A person at the demo page: fire the stampede with the lock on, then off, and read the result. */
describe('the demo page in a browser', () => {
  let server: RedisServer;
  let app: INestApplication;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    server = await RedisServer.start();
    const module = await Test.createTestingModule({
      imports: [AppModule.register(readDemoConfig({ REDIS_URL: server.url }))],
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
    await server?.stop();
  });

  async function fireAndRead(lock: 'on' | 'off'): Promise<number> {
    await page.locator('#lock').setChecked(lock === 'on');
    await page.locator('#fire').click();
    await page
      .locator('#state')
      .filter({ hasText: `lock ${lock}` })
      .waitFor({ timeout: 20_000 });
    await page.screenshot({ path: `${ARTIFACTS}/demo-page-lock-${lock}.png` });
    return Number(await page.locator('#backend-calls').textContent());
  }

  it('shows 1 backend call with the lock on', async () => {
    expect(await fireAndRead('on')).toBe(1);
    expect(await page.locator('#statuses').textContent()).toBe('100×200');
    expect(await page.locator('#histogram rect').count()).toBeGreaterThan(0);
  });

  it('shows more than 1 backend call with the lock off', async () => {
    expect(await fireAndRead('off')).toBeGreaterThan(1);
  });
});
