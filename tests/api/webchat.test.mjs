// The web chat page (GET /, issue 15 item 3) in a real browser: Debian's
// chromium driven by puppeteer-core (which downloads no browser). A picture
// and a question are sent through the page, the streamed answer and the
// turn's numbers appear, the second turn shows the reuse that the server's
// /metrics counted, the stop button cancels a long answer on the server,
// and behind --api-key the page asks for the key and then works.
//
// Needs /usr/bin/chromium (or PH_CHROMIUM) and puppeteer-core (npm ci);
// scripts/setup.sh installs chromium. A screenshot of each page is written
// to $PH_ARTIFACT_DIR (ctest sets it to the build folder's test-artifacts;
// default build/test-artifacts).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { get, imgPath, metric, metrics, MODEL_ID, startServer, stopServer, waitMetrics } from './helpers.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const CHROMIUM = process.env.PH_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.PH_ARTIFACT_DIR || join(HERE, '..', '..', 'build', 'test-artifacts');
const PICTURE = imgPath('grad.png');
const KEY = 'web-page-test-key-1';

// A missing browser or driver fails the file (CI installs both) and says how to install them.
if (!existsSync(join(HERE, 'node_modules', 'puppeteer-core', 'package.json'))) {
  throw new Error(`puppeteer-core is not installed: run \`npm ci\` in ${HERE}`);
}
if (!existsSync(CHROMIUM)) {
  throw new Error(`no chromium at ${CHROMIUM}: install it with \`apt-get install -y chromium\` ` +
                  '(scripts/setup.sh does), or point PH_CHROMIUM at a Chromium binary');
}
const puppeteer = (await import('puppeteer-core')).default;

let browser;
before(async () => {
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // root (CI containers) cannot use chromium's sandbox
    args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-dev-shm-usage'],
  });
});
after(async () => { await browser?.close(); });

// A fresh page (its own storage) on srv's page; problems collects what the
// console reports as errors (a script error, a Content-Security-Policy violation).
async function open(srv, problems, height = 760) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.setViewport({ width: 1200, height });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(e.message));
  await page.goto(srv.url + '/', { waitUntil: 'load' });
  return { ctx, page };
}

const modelShown = (page) => page.waitForFunction(
  (id) => document.getElementById('model').textContent === id, { timeout: 30_000 }, MODEL_ID);

// Waits for the n-th answer (1-based) to end; returns its state, text and numbers.
async function answer(page, n, timeout = 60_000) {
  const sel = `article.msg.assistant:nth-of-type(${2 * n})`;
  await page.waitForFunction((s) => ['done', 'length', 'stopped', 'error'].includes(document.querySelector(s)?.dataset.state),
                             { timeout }, sel).catch(async (e) => {
    e.message += `; answer ${n} did not end; the conversation: ${await page.$eval('#log', (l) => l.innerText)}`;
    throw e;
  });
  return page.$eval(sel, (a) => ({
    state: a.dataset.state,
    text: a.querySelector('.answer').textContent,
    error: a.querySelector('.error').textContent,
    stats: Object.fromEntries([...a.querySelectorAll('dd[data-stat]')].map((d) => [d.dataset.stat, Number(d.dataset.value)])),
  }));
}

async function ask(page, text) {
  await page.focus('#prompt');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function screenshot(page, name, t) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, name);
  await page.screenshot({ path });
  t.diagnostic(`screenshot: ${path}`);
  console.log(`webchat: screenshot written to ${path}`);
}

const noProblems = (problems) => assert.deepEqual(problems, [], 'the console reported errors');

describe('web chat page', { timeout: 300_000 }, () => {
  test('GET / is the page, with its policy and cache headers, and needs no key', async () => {
    const srv = await startServer({ vision: false, extra: ['--api-key', KEY] });
    try {
      const r = await fetch(srv.url + '/');
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-type'), 'text/html; charset=utf-8');
      const csp = r.headers.get('content-security-policy');
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/]+=*'/);
      assert.match(csp, /connect-src 'self'/);
      assert.doesNotMatch(csp, /unsafe-inline|https?:/);
      assert.equal(r.headers.get('cache-control'), 'no-cache');
      const html = await r.text();
      assert.match(html, /<title>pinhole chat<\/title>/);
      assert.doesNotMatch(html, /(src|href)="https?:/, 'no external assets');
      const etag = r.headers.get('etag');
      assert.match(etag, /^"[0-9a-f]{16}"$/);
      const again = await fetch(srv.url + '/', { headers: { 'If-None-Match': etag } });
      assert.equal(again.status, 304);
      assert.equal((await get(srv, '/index.html')).status, 200);
      // the API behind it still needs the key
      assert.equal((await get(srv, '/v1/models')).status, 401);
      assert.equal((await get(srv, '/v1/models', { Authorization: `Bearer ${KEY}` })).status, 200);
    } finally {
      await stopServer(srv);
    }
  });

  test('a picture and a question, streamed; the second turn reuses the first', async (t) => {
    const srv = await startServer({ extra: ['--max-tokens', '24'] });
    const problems = [];
    const { ctx, page } = await open(srv, problems, 1000);
    try {
      await modelShown(page);
      const input = await page.$('#file');
      await input.uploadFile(PICTURE);
      await page.waitForSelector('#attachments figure img');
      await ask(page, 'What is in this picture?');
      // the answer streams in, then its numbers
      await page.waitForSelector('#stop:not([hidden])');
      const first = await answer(page, 1);
      assert.ok(['done', 'length'].includes(first.state), `first answer: ${JSON.stringify(first)}`);
      assert.ok(first.text.length > 0, 'the first answer has text');
      assert.equal(first.stats.pictures, 1);
      assert.equal(first.stats.encoded, 1, 'the picture is encoded on the first turn');
      assert.ok(first.stats.ttft >= 0);
      assert.equal(await page.$eval('#attachments', (e) => e.children.length), 0, 'the picture was sent');
      assert.ok(await page.$eval('article.msg.user img', (i) => i.src.startsWith('data:image/png;base64,')));

      const before = await metrics(srv);
      await ask(page, 'And what colour is it?');
      const second = await answer(page, 2);
      const after = await metrics(srv);
      assert.ok(['done', 'length'].includes(second.state), `second answer: ${JSON.stringify(second)}`);
      assert.ok(second.text.length > 0);
      // what the page shows is what the server counted
      const reused = metric(after, 'pinhole_prompt_tokens_reused_total') - metric(before, 'pinhole_prompt_tokens_reused_total');
      const encoded = metric(after, 'pinhole_images_encoded_total') - metric(before, 'pinhole_images_encoded_total');
      assert.ok(second.stats.reused > 0, `the second turn reuses the first: ${JSON.stringify(second.stats)}`);
      assert.equal(second.stats.reused, reused, 'reused tokens as /metrics counted them');
      assert.ok(second.stats.reused >= first.stats.prompt, 'the whole first prompt is reused');
      assert.equal(second.stats.pictures, 1);
      assert.equal(second.stats.encoded, 0, 'the picture is not encoded again');
      assert.equal(encoded, 0, '/metrics: no picture encoded on the second turn');
      assert.equal(second.stats.pictures_kept, 1, 'the picture is kept in the KV');
      assert.equal(second.stats.from_ram + second.stats.from_disk, 0, 'reused from the live state');
      assert.ok(await page.$eval('#stop', (b) => b.hidden), 'no stop button once the answer is done');
      await screenshot(page, 'webchat.png', t);

      // kept across a reload; a new chat; switching; deleting
      await page.reload({ waitUntil: 'load' });
      await modelShown(page);
      assert.equal(await page.$$eval('#chat-list li', (l) => l.length), 1);
      assert.equal(await page.$$eval('#log article', (l) => l.length), 4);
      assert.equal(await page.$eval('#chat-list .open', (b) => b.textContent), 'What is in this picture?');
      assert.equal((await answer(page, 2)).stats.reused, second.stats.reused, 'the numbers are kept too');
      await page.click('#new-chat');
      assert.equal(await page.$$eval('#log article', (l) => l.length), 0, 'the new chat is empty');
      await ask(page, 'Hello there.');
      await answer(page, 1);
      assert.deepEqual(await page.$$eval('#chat-list .open', (l) => l.map((b) => b.textContent)),
                       ['Hello there.', 'What is in this picture?'], 'the newest conversation first');
      await page.click('#chat-list li:nth-child(2) .open');
      assert.equal(await page.$$eval('#log article', (l) => l.length), 4, 'switched back');
      await page.click('#chat-list li:nth-child(2) .delete');
      assert.deepEqual(await page.$$eval('#chat-list .open', (l) => l.map((b) => b.textContent)), ['Hello there.']);
      const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('pinhole.chats.v1')));
      assert.equal(stored.chats.length, 1, 'deleted from storage too');
      noProblems(problems);
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });

  test('the stop button cancels a long answer on the server', async (t) => {
    const srv = await startServer({ vision: false, extra: ['--max-tokens', '0'] });
    const problems = [];
    const { ctx, page } = await open(srv, problems);
    try {
      await modelShown(page);
      await ask(page, 'Tell me a very long story.');
      await page.waitForFunction(() => document.querySelector('article.msg.assistant .answer')?.textContent.length > 0,
                                 { timeout: 60_000 });
      await page.click('#stop');
      const a = await answer(page, 1);
      assert.equal(a.state, 'stopped');
      assert.ok(a.text.length > 0, 'what came before the stop is kept');
      assert.equal(await page.$eval('article.msg.assistant .status', (p) => p.textContent), 'Stopped.');
      const m = await waitMetrics(srv, (s) => metric(s, 'pinhole_requests_cancelled_total') >= 1, 10_000);
      assert.equal(metric(m, 'pinhole_requests_cancelled_total'), 1, 'the server cancelled the request');
      assert.ok(await page.$eval('#send', (b) => !b.hidden), 'the send button is back');
      await screenshot(page, 'webchat-stopped.png', t);
      noProblems(problems);
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });

  test('behind --api-key the page asks for the key, then works', async (t) => {
    const srv = await startServer({ vision: false, extra: ['--api-key', KEY, '--max-tokens', '8'] });
    const problems = [];
    const { ctx, page } = await open(srv, problems);
    try {
      await page.waitForSelector('#key-form:not([hidden])', { timeout: 30_000 });
      assert.match(await page.$eval('#key-why', (p) => p.textContent), /needs an API key/);
      // a wrong key is refused, with the server's message
      await page.type('#key-input', 'not-the-key');
      await page.click('#key-form button[type=submit]');
      await page.waitForFunction(() => /refused/.test(document.getElementById('key-why').textContent) &&
                                       !document.getElementById('key-form').hidden, { timeout: 30_000 });
      assert.match(await page.$eval('#key-why', (p) => p.textContent), /valid API key is required/);
      await page.type('#key-input', KEY);
      await page.click('#key-form button[type=submit]');
      await modelShown(page);
      assert.ok(await page.$eval('#key-form', (f) => f.hidden));
      await ask(page, 'Hello behind a key.');
      const a = await answer(page, 1);
      assert.ok(['done', 'length'].includes(a.state), JSON.stringify(a));
      assert.ok(await page.$eval('#key-form', (f) => f.hidden), 'asked once');
      assert.equal(await page.evaluate(() => sessionStorage.getItem('pinhole.api-key')), KEY);
      assert.equal(await page.evaluate(() => localStorage.getItem('pinhole.api-key')), null, 'not remembered unasked');
      // a reload keeps the key for the session: no question
      await page.reload({ waitUntil: 'load' });
      await modelShown(page);
      assert.ok(await page.$eval('#key-form', (f) => f.hidden));
      await screenshot(page, 'webchat-key.png', t);
      // "Forget API key" forgets it: the next request asks again
      await page.click('#forget-key');
      assert.equal(await page.evaluate(() => sessionStorage.getItem('pinhole.api-key')), null);
      await ask(page, 'Again.');
      await page.waitForSelector('#key-form:not([hidden])');
      await page.type('#key-input', KEY);
      await page.click('#key-form button[type=submit]');
      assert.ok(['done', 'length'].includes((await answer(page, 2)).state));
      // the browser reported 401s for the refused requests; nothing else
      noProblems(problems.filter((p) => !/status of 401/.test(p)));
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });

  test('reasoning is shown folded apart from the answer, and sent back with the history', async () => {
    // --allow-forced-output: the one field the page does not send is added on
    // its way out, to make the synthetic model write a reasoning and an answer
    const srv = await startServer({ vision: false, extra: ['--allow-forced-output', '--max-tokens', '64'] });
    const problems = [];
    const { ctx, page } = await open(srv, problems);
    const sent = [];
    try {
      await page.setRequestInterception(true);
      page.on('request', (req) => {
        if (req.method() !== 'POST' || !req.url().endsWith('/v1/chat/completions')) return req.continue();
        const body = JSON.parse(req.postData());
        sent.push(body);
        body.forced_output = '<think>\nFirst, look at the shapes.\n</think>\n\nA circle.';
        return req.continue({ postData: JSON.stringify(body) });
      });
      await modelShown(page);
      await ask(page, 'What shape?');
      const a = await answer(page, 1);
      assert.equal(a.state, 'done', JSON.stringify(a));
      assert.equal(a.text.trim(), 'A circle.');
      const r = await page.$eval('article.msg.assistant details.reasoning', (d) =>
        ({ hidden: d.hidden, open: d.open, summary: d.querySelector('summary').textContent, text: d.querySelector('.text').textContent }));
      assert.deepEqual({ ...r, text: r.text.trim() },
                       { hidden: false, open: false, summary: 'Reasoning', text: 'First, look at the shapes.' });
      await page.click('article.msg.assistant details.reasoning summary');
      assert.ok(await page.$eval('article.msg.assistant details.reasoning', (d) => d.open), 'opens on a click');
      await ask(page, 'Sure?');
      await answer(page, 2);
      assert.equal(sent.length, 2);
      const prev = sent[1].messages[1];
      assert.equal(prev.role, 'assistant');
      assert.equal(prev.content.trim(), 'A circle.');
      assert.equal(prev.reasoning_content.trim(), 'First, look at the shapes.');
      assert.deepEqual(sent[1].stream_options, { include_usage: true });
      assert.equal(sent[1].model, MODEL_ID);
      noProblems(problems);
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });

  test('pictures by paste and drop, other files refused; a full storage keeps the text, not the pictures', async () => {
    const srv = await startServer({ extra: ['--max-tokens', '8'] });
    const problems = [];
    const { ctx, page } = await open(srv, problems);
    try {
      await modelShown(page);
      const b64 = readFileSync(PICTURE).toString('base64');
      // a picture pasted into the message box, another dropped on it
      await page.evaluate((data) => {
        const file = (name) => new File([Uint8Array.from(atob(data), (c) => c.charCodeAt(0))], name, { type: 'image/png' });
        const pasted = new DataTransfer();
        pasted.items.add(file('pasted.png'));
        const box = document.getElementById('prompt');
        box.dispatchEvent(new ClipboardEvent('paste', { clipboardData: pasted, bubbles: true, cancelable: true }));
        const dropped = new DataTransfer();
        dropped.items.add(file('dropped.png'));
        box.dispatchEvent(new DragEvent('dragover', { dataTransfer: dropped, bubbles: true, cancelable: true }));
        box.dispatchEvent(new DragEvent('drop', { dataTransfer: dropped, bubbles: true, cancelable: true }));
      }, b64);
      await page.waitForFunction(() => document.querySelectorAll('#attachments img').length === 2);
      assert.deepEqual(await page.$$eval('#attachments img', (l) => l.map((i) => i.alt)), ['pasted.png', 'dropped.png']);
      // not a picture: refused with a message, nothing attached
      const input = await page.$('#file');
      await input.uploadFile(join(HERE, 'package.json'));
      await page.waitForSelector('#composer-error:not([hidden])');
      assert.match(await page.$eval('#composer-error', (p) => p.textContent), /package\.json is not a PNG, JPEG, WebP or GIF/);
      assert.equal(await page.$$eval('#attachments img', (l) => l.length), 2);
      await page.click('#attachments figure:nth-child(2) button');
      assert.deepEqual(await page.$$eval('#attachments img', (l) => l.map((i) => i.alt)), ['pasted.png']);

      // fill the origin's storage but for a little room: enough for the
      // conversation's text, not for its picture
      await page.evaluate(() => {
        let n = 0;
        for (const size of [1 << 20, 1 << 16, 1 << 12, 1 << 8, 16]) {
          for (;;) {
            try { localStorage.setItem(`filler-${n++}`, 'x'.repeat(size)); } catch { break; }
          }
        }
        localStorage.removeItem('filler-0');      // a 1 MiB one: room for the first turn
      });
      await ask(page, 'What is this?');
      assert.equal((await answer(page, 1)).stats.encoded, 1);
      assert.ok(await page.$eval('#storage-note', (p) => p.hidden), 'the first turn fits');
      await page.evaluate(() => {
        // no room left: the second turn fits only without the picture
        let n = 0;
        for (const size of [1 << 10, 16]) {
          for (;;) {
            try { localStorage.setItem(`more-${n++}`, 'x'.repeat(size)); } catch { break; }
          }
        }
      });
      await ask(page, 'Again?');
      await answer(page, 2);
      assert.match(await page.$eval('#storage-note', (p) => p.textContent), /storage is full: the pictures of 1 conversation/);
      const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('pinhole.chats.v1')));
      assert.equal(stored.chats.length, 1);
      assert.deepEqual(stored.chats[0].messages.map((m) => m.text.length > 0), [true, true, true, true], 'the text is kept');
      assert.deepEqual(stored.chats[0].messages[0].images, [null], 'the picture is not');
      assert.equal(await page.$$eval('#log article.msg.user img', (l) => l.length), 1, 'the page still shows it');
      await page.reload({ waitUntil: 'load' });
      assert.match(await page.$eval('#log', (l) => l.innerText), /Picture not kept \(browser storage was full\)/);
      noProblems(problems);
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });

  test('the server\'s error message is shown', async () => {
    // a picture for a server without --mmproj: 400 with a message
    const srv = await startServer({ vision: false });
    const problems = [];
    const { ctx, page } = await open(srv, problems);
    try {
      await modelShown(page);
      await (await page.$('#file')).uploadFile(PICTURE);
      await page.waitForSelector('#attachments figure img');
      await ask(page, 'What is this?');
      const a = await answer(page, 1);
      assert.equal(a.state, 'error');
      assert.match(a.error, /^The answer failed: 400: .*mmproj/);
      noProblems(problems.filter((p) => !/status of 400/.test(p)));
    } finally {
      await ctx.close();
      await stopServer(srv);
    }
  });
});
