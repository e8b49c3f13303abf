// Drives code-server in headless Chromium (puppeteer-core, Debian's chromium) as a person would:
// waits for the ctxd status-bar gauge to show the usage the daemon reported after the stand-in
// agent's records, clicks it, and checks that the breakdown view opens. Saves screenshots.
// Environment: CTXD_E2E_URL, CTXD_E2E_WORKSPACE, CTXD_E2E_ARTIFACTS, CHROMIUM, and NODE_PATH
// reaching puppeteer-core.
const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');
const { gaugeText } = require('../../out/src/status.js');

const url = process.env.CTXD_E2E_URL;
const workspace = process.env.CTXD_E2E_WORKSPACE;
const artifacts = process.env.CTXD_E2E_ARTIFACTS;
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = Number(process.env.CTXD_E2E_TIMEOUT_MS || 90_000);

function log(msg) {
  console.log(`[e2e] ${msg}`);
}

/** Re-checks `probe` until it returns something truthy (the file is written by another process). */
async function until(what, probe, timeout = TIMEOUT) {
  const end = Date.now() + timeout;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function gaugeItems(page) {
  return page.$$eval('.statusbar-item', (els) =>
    els.map((e) => ({ id: e.id, text: (e.textContent || '').trim(), label: e.getAttribute('aria-label') || '' })),
  );
}

async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-e2e-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    userDataDir: profile,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  let page;
  let failed = false;
  try {
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
    page.on('pageerror', (e) => log(`page error: ${e.message}`));
    log(`opening ${url}`);
    await page.goto(url, { waitUntil: 'domcontentloaded', timeout: TIMEOUT });
    await page.waitForSelector('.statusbar', { timeout: TIMEOUT });
    log('workbench is up');

    const resultFile = path.join(workspace, '.ctxd-e2e', 'result.json');
    const result = await until('the agent extension to record', () =>
      fs.existsSync(resultFile) ? JSON.parse(fs.readFileSync(resultFile, 'utf8')) : undefined,
    );
    if (!result.ok) throw new Error(`the agent extension failed: ${result.error}`);
    const expected = gaugeText(result.usage);
    const visible = expected.replace(/^\$\([^)]*\)\s*/, '');
    log(`daemon reported ${JSON.stringify(result.usage)}; expecting the gauge "${expected}"`);

    try {
      await page.waitForFunction(
        (want) => [...document.querySelectorAll('.statusbar-item')].some((e) => (e.textContent || '').includes(want)),
        { timeout: TIMEOUT, polling: 'mutation' },
        visible,
      );
    } catch (err) {
      log(`status bar items: ${JSON.stringify(await gaugeItems(page))}`);
      throw err;
    }
    const item = (await gaugeItems(page)).find((i) => i.text.includes(visible));
    log(`status bar shows "${item.text}" (id ${item.id})`);
    const hasIcon = await page.evaluate(
      (want) =>
        [...document.querySelectorAll('.statusbar-item')].some(
          (e) => (e.textContent || '').includes(want) && e.querySelector('.codicon-pulse'),
        ),
      visible,
    );
    if (!hasIcon) throw new Error('the gauge has no $(pulse) icon');
    await page.screenshot({ path: path.join(artifacts, 'vscode-gauge.png') });

    // Hovering shows the tooltip with the breakdown's top categories.
    const box = await page.evaluate((want) => {
      const el = [...document.querySelectorAll('.statusbar-item')].find((e) => (e.textContent || '').includes(want));
      const r = el.getBoundingClientRect();
      return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
    }, visible);
    await page.mouse.move(box.x, box.y);
    const hover = await page
      .waitForFunction(
        () => {
          const h = [...document.querySelectorAll('.workbench-hover, .monaco-hover')].find((e) =>
            (e.textContent || '').includes('Top categories'),
          );
          return h ? h.textContent : false;
        },
        { timeout: 15_000, polling: 'mutation' },
      )
      .then((h) => h.jsonValue());
    if (!/Messages: /.test(hover)) throw new Error(`the tooltip lacks the Messages category: ${hover}`);
    log('tooltip lists the top categories');
    await page.screenshot({ path: path.join(artifacts, 'vscode-tooltip.png') });
    await page.mouse.move(10, 10);

    // Click the gauge: the breakdown view opens in an editor tab.
    await page.evaluate((want) => {
      const el = [...document.querySelectorAll('.statusbar-item')].find((e) => (e.textContent || '').includes(want));
      (el.querySelector('a') || el).click();
    }, visible);
    await page.waitForFunction(
      () => [...document.querySelectorAll('.tab')].some((t) => (t.getAttribute('aria-label') || t.textContent || '').includes('Context Usage')),
      { timeout: TIMEOUT, polling: 'mutation' },
    );
    log('breakdown tab is open');

    // The webview's own document sits in nested iframes; find the one with our page.
    const total = `${expected.split(' · ')[1]} tokens`;
    let body = '';
    await until('the breakdown page to render', async () => {
      for (const frame of page.frames()) {
        try {
          const text = await frame.evaluate(() => (document.body ? document.body.innerText : ''));
          if (text.includes('Context Usage') && text.includes('Category')) {
            body = text;
            return true;
          }
        } catch {
          // Frames come and go while the webview loads.
        }
      }
      return false;
    }, 30_000);
    if (!body.includes(total)) throw new Error(`the breakdown does not show "${total}":\n${body}`);
    log(`breakdown shows "${total}" and its table`);
    await page.screenshot({ path: path.join(artifacts, 'vscode-breakdown.png') });
    log(`screenshots in ${artifacts}`);
  } catch (err) {
    failed = true;
    console.error(`[e2e] FAILED: ${err && err.stack ? err.stack : err}`);
    if (page) await page.screenshot({ path: path.join(artifacts, 'vscode-failure.png') }).catch(() => undefined);
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
}

main();
