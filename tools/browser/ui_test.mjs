// The checks of the `tlr ui` browser test (see ui_test.sh, which starts the servers):
// Debian's headless Chromium through playwright-core uses the page as a person would.
// Usage: node ui_test.mjs MAIN_URL DOWN_URL ARTIFACT_DIR CHROMIUM HAS_RESULTS
import http from 'node:http';
import { chromium } from 'playwright-core';

const [mainUrl, downUrl, artifacts, executablePath, hasResultsArg] = process.argv.slice(2);
const hasResults = Number(hasResultsArg) > 0;
const t0 = Date.now();
let passed = 0;
let failed = 0;

function check(name, ok, detail = '') {
  if (ok) {
    passed++;
    console.log(`ok   ${name}${detail ? ' (' + detail + ')' : ''}`);
  } else {
    failed++;
    console.log(`FAIL ${name}${detail ? ': ' + detail : ''}`);
  }
}

// Runs one scenario; an exception (a selector that never appeared, ...) fails it and the rest go on.
async function scenario(name, fn) {
  const start = Date.now();
  console.log(`--- ${name}`);
  try {
    await fn();
  } catch (e) {
    check(`${name}: ran to the end`, false, e.stack || String(e));
  }
  console.log(`    (${((Date.now() - start) / 1000).toFixed(1)} s)`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const count = (page, sel) => page.locator(sel).count();
const text = (page, sel) => page.locator(sel).innerText();
const attr = (page, sel, a) => page.locator(sel).getAttribute(a);

// Clicks Start and waits for the status to leave "running".
async function run(page, wantState = 'done', timeout = 60000) {
  await page.click('#start');
  await page.waitForSelector(`#status:not([data-state="running"])`, { timeout });
  const state = await attr(page, '#status', 'data-state');
  if (state !== wantState) {
    const err = await page.locator('#error').isVisible() ? await text(page, '#error-text') : '';
    throw new Error(`status is '${state}' (${await text(page, '#status')}), wanted '${wantState}' ${err}`);
  }
}

// A raw HTTP request (node's http, which lets the test set the Host header).
function rawRequest(url, { method = 'GET', headers = {}, body = '' } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method, headers }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const origin = new URL(mainUrl).origin;
  const outside = [];
  const pageErrors = [];
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith('data:') && new URL(u).origin !== origin) outside.push(u);
  });
  page.on('pageerror', (e) => pageErrors.push(e.message));

  let jointTokens = 0;

  await scenario('page loads', async () => {
    await page.goto(mainUrl);
    await page.waitForSelector('#status[data-state="ready"]', { timeout: 15000 });
    check('title', (await page.title()).includes('TLR'), await page.title());
    const examples = await count(page, '#example option');
    check('example questions offered', examples >= 2, `${examples - 1} examples`);
    check('prompt prefilled with the first example', (await page.inputValue('#prompt')).startsWith('Question: '));
    const routers = await page.$$eval('#router option', (os) => os.map((o) => o.value));
    check('router kinds', ['citer', 'maxprob', 'entropy', 'random'].every((k) => routers.includes(k)), routers.join(','));
    const info = await (await fetch(new URL('/api/info', mainUrl))).json();
    check('threshold starts at the router\'s recommended one',
          await text(page, '#threshold-value') === info.threshold.toFixed(2),
          `${await text(page, '#threshold-value')} vs ${info.threshold}`);
    check('models named', /slm\.gguf.*llm\.gguf/.test(await text(page, '#models')), await text(page, '#models'));
    check('chart shown with --results', !hasResults || await page.locator('#chart-box').isVisible());
  });

  let blocking = null;  // the blocking run's tokens and stall, for the pipelined run
  const sources = (page) => page.$$eval('#text .tok', (ts) => ts.map((t) => t.className + '|' + t.textContent));
  await scenario('joint at a high threshold: red LLM tokens', async () => {
    await page.selectOption('#example', '0');
    await page.selectOption('#mode', 'joint');
    await page.setChecked('#pipeline', false);  // blocking: every routed token waits its round trip
    await page.fill('#threshold', '0.99');
    await page.fill('#max-tokens', '60');
    check('slider value shown', await text(page, '#threshold-value') === '0.99');
    await run(page);
    const llm = await count(page, '#text .tok-llm');
    const all = await count(page, '#text .tok');
    jointTokens = all;
    check('LLM tokens in the text', llm > 0, `${llm} of ${all}`);
    check('statistics count every token', await text(page, '#st-tokens') === String(all), await text(page, '#st-tokens'));
    check('statistics count the routed ones', (await text(page, '#st-routed')).startsWith(`${llm} (`),
          await text(page, '#st-routed'));
    // Blocking, no lookahead: the LLM generated exactly the routed tokens.
    check('LLM work: one token generated per routed token',
          (await text(page, '#st-llmwork')).startsWith(`${llm} generated (1.00 per routed)`), await text(page, '#st-llmwork'));
    check('one strip bar per token', await count(page, '#strip-bars rect') === all);
    const color = await page.locator('#text .tok-llm').first().evaluate((e) => getComputedStyle(e).color);
    check('LLM tokens are red', color === 'rgb(200, 16, 46)', color);
    const slmColor = await page.locator('#text .tok-slm').first().evaluate((e) => getComputedStyle(e).color);
    check('SLM tokens are not', slmColor !== color, slmColor);
    await page.locator('#text .tok-llm').first().hover();
    const title = await page.locator('#text .tok-llm').first().getAttribute('title');
    check('hover shows source and confidence', /^LLM · confidence 0\.\d{3}/.test(title || ''), title);
    check('the answer is there', /answer is/.test(await text(page, '#text')));
    check('timings shown', /ms|s$/.test(await text(page, '#st-ttft')) && /ms|s$/.test(await text(page, '#st-network')),
          `TTFT ${await text(page, '#st-ttft')}, network ${await text(page, '#st-network')}`);
    const network = parseFloat(await text(page, '#st-network'));
    check('network time carries the simulated round trips', network >= 150 * llm * 0.9 || /s$/.test(await text(page, '#st-network')),
          `${await text(page, '#st-network')} for ${llm} LLM tokens at 150 ms`);
    await page.screenshot({ path: `${artifacts}/ui.png`, fullPage: true });
    console.log(`    screenshot: ${artifacts}/ui.png`);
    check('pipeline off reported', await text(page, '#st-spec') === 'pipeline off', await text(page, '#st-spec'));
    blocking = { tokens: await sources(page), stall: parseFloat(await text(page, '#st-stall')), unit: await text(page, '#st-stall') };
  });

  await scenario('pipeline on: provisional text while the LLM answers, then the same tokens', async () => {
    await page.setChecked('#pipeline', true);
    // Record the provisional tail as the page draws it (a routed token is 150 ms away).
    await page.evaluate(() => {
      window.__prov = { max: 0, pending: 0, texts: 0 };
      new MutationObserver(() => {
        const p = document.getElementById('provisional');
        if (!p) return;
        window.__prov.max = Math.max(window.__prov.max, Number(p.dataset.count || 0));
        window.__prov.pending = Math.max(window.__prov.pending, Number(p.dataset.pending || 0));
        if (p.textContent) window.__prov.texts++;
      }).observe(document.getElementById('text'), { subtree: true, childList: true, attributes: true, characterData: true });
    });
    await run(page);
    const prov = await page.evaluate(() => window.__prov);
    check('provisional tokens drawn while waiting', prov.max > 0 && prov.texts > 0, JSON.stringify(prov));
    check('provisional tail waited on routed tokens', prov.pending > 0, JSON.stringify(prov));
    const provStyle = await page.locator('#provisional').evaluate((e) => getComputedStyle(e).fontStyle);
    check('provisional text is drawn differently (italic)', provStyle === 'italic', provStyle);
    check('no provisional text once done', await text(page, '#provisional') === '' &&
          await attr(page, '#provisional', 'data-count') === '0');
    const tokens = await sources(page);
    check('confirmed tokens as SLM/LLM, identical to the blocking run', blocking &&
          JSON.stringify(tokens) === JSON.stringify(blocking.tokens), `${tokens.length} vs ${blocking && blocking.tokens.length}`);
    check('speculation statistics shown', /answered|lookahead/.test(await text(page, '#st-spec')), await text(page, '#st-spec'));
    const stallText = await text(page, '#st-stall');
    const toMs = (t) => parseFloat(t) * (/ ms$/.test(t) ? 1 : 1000);
    check('less waiting than blocking', blocking && toMs(stallText) < toMs(blocking.unit),
          `${stallText} vs ${blocking && blocking.unit}`);
  });

  await scenario('small_only: no LLM tokens', async () => {
    await page.selectOption('#mode', 'small_only');
    await run(page);
    const all = await count(page, '#text .tok');
    check('tokens generated', all > 0, `${all}`);
    check('no LLM tokens', await count(page, '#text .tok-llm') === 0);
    check('0 routed in the statistics', (await text(page, '#st-routed')).startsWith('0 ('), await text(page, '#st-routed'));
    check('no LLM work', (await text(page, '#st-llmwork')).startsWith('0 generated (none routed), 0 prefilled'),
          await text(page, '#st-llmwork'));
  });

  await scenario('slider moves the threshold line', async () => {
    const before = { value: await text(page, '#threshold-value'), y: await attr(page, '#threshold-line', 'y1'),
                     marker: hasResults ? await attr(page, '#chart-marker', 'x1') : null };
    await page.focus('#threshold');
    for (let i = 0; i < 10; ++i) await page.keyboard.press('ArrowLeft');
    const after = { value: await text(page, '#threshold-value'), y: await attr(page, '#threshold-line', 'y1'),
                    marker: hasResults ? await attr(page, '#chart-marker', 'x1') : null };
    check('value text follows the keyboard', before.value === '0.99' && after.value === '0.89', `${before.value} -> ${after.value}`);
    check('threshold line moves down', Number(after.y) > Number(before.y), `y ${before.y} -> ${after.y}`);
    check('line at the threshold\'s height', Math.abs(Number(after.y) - (80 - 0.89 * 66)) < 0.1, after.y);
    if (hasResults) check('chart marker moves', Number(after.marker) < Number(before.marker), `x ${before.marker} -> ${after.marker}`);
    // The mouse: a click a quarter of the way along the track.
    const box = await page.locator('#threshold').boundingBox();
    await page.mouse.click(box.x + box.width * 0.25, box.y + box.height / 2);
    const v = Number(await text(page, '#threshold-value'));
    check('a click on the track sets about 0.25', Math.abs(v - 0.25) < 0.05, String(v));
    const y = Number(await attr(page, '#threshold-line', 'y1'));
    check('and the line follows', Math.abs(y - (80 - v * 66)) < 0.1, String(y));
    const highlighted = await count(page, '#strip-bars rect.below');
    const expected = await page.$$eval('#strip-bars rect', (bs, t) => bs.filter((b) => {
      const c = Number(b.dataset.conf);
      return c >= 0 && c < t;
    }).length, v);
    check('bars under the line are highlighted', highlighted === expected, `${highlighted} of ${await count(page, '#strip-bars rect')}`);
  });

  await scenario('Stop cancels a long generation', async () => {
    await page.selectOption('#mode', 'joint');
    await page.setChecked('#pipeline', false);  // slow enough to stop half way
    await page.fill('#threshold', '1');
    await page.fill('#max-tokens', '2000');
    await page.click('#start');
    await page.waitForFunction(() => document.querySelectorAll('#text .tok').length >= 2, null, { timeout: 20000 });
    const clicked = Date.now();
    await page.click('#stop');
    await page.waitForSelector('#status[data-state="stopped"]', { timeout: 10000 });
    const took = Date.now() - clicked;
    const n1 = await count(page, '#text .tok');
    check('the page says stopped', /stopped/.test(await text(page, '#status')), await text(page, '#status'));
    check('stopped promptly', took < 3000, `${took} ms`);
    check('the device reports stop "stopped"', await text(page, '#st-stop') === 'stopped');
    await sleep(1000);
    const n2 = await count(page, '#text .tok');
    check('no tokens after the stop', n1 === n2, `${n1} then ${n2}`);
    check('stopped before the answer ended', jointTokens === 0 || n1 < jointTokens, `${n1} tokens, a full answer has ${jointTokens}`);
    check('Start usable again', await page.isEnabled('#start') && !(await page.isEnabled('#stop')));
  });

  await scenario('errors appear in the page', async () => {
    await page.fill('#threshold', '0.5');
    await page.fill('#max-tokens', '100000');
    await run(page, 'error');
    check('bad max tokens: message shown', /max_tokens.*1\.\.4096/.test(await text(page, '#error-text')),
          await text(page, '#error-text'));
    check('page not blank', (await page.locator('body').innerText()).length > 200 && await page.isVisible('#prompt'));
    await page.click('#error-close');
    check('error dismissable', !(await page.locator('#error').isVisible()));
    await page.fill('#max-tokens', '20');
    await page.fill('#prompt', '');
    await run(page, 'error');
    check('empty prompt: message shown', /prompt/.test(await text(page, '#error-text')), await text(page, '#error-text'));
    await page.selectOption('#example', '1');
    // The server unreachable: the request fails in the network layer.
    await page.route('**/api/generate', (r) => r.abort('connectionrefused'));
    await run(page, 'error');
    check('unreachable server: message shown', /cannot reach the tlr ui server/.test(await text(page, '#error-text')),
          await text(page, '#error-text'));
    await page.unroute('**/api/generate');
    await run(page, 'done');
    check('works again afterwards', await count(page, '#text .tok') > 0 && !(await page.locator('#error').isVisible()));
  });

  await scenario('API guards', async () => {
    const post = (body, type = 'application/json') => rawRequest(`${mainUrl}/api/generate`, {
      method: 'POST', headers: { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) }, body,
    });
    let r = await post('{"prompt": "x"}', 'text/plain');
    check('non-JSON POST refused (no cross-site forms)', r.status === 415, `${r.status}`);
    r = await post('{"prompt": "x", "mode": "both"}');
    check('bad mode: 400', r.status === 400 && /unknown mode/.test(r.body), r.body);
    r = await post('{"prompt": "x", "threshold": 1.5}');
    check('bad threshold: 400', r.status === 400 && /'threshold' must be a number in 0\.\.1/.test(r.body), r.body);
    r = await post('{"prompt": "x", "router": "nope"}');
    check('bad router: 400', r.status === 400 && /citer, maxprob, entropy, random/.test(r.body), r.body);
    r = await rawRequest(`${mainUrl}/api/info`, { headers: { Host: 'attacker.example' } });
    check('foreign Host refused (DNS rebinding)', r.status === 403, `${r.status}`);
    // Closing the stream cancels the generation on the device: a long one is opened, read for
    // two tokens and dropped; a moment later there is nothing left to stop.
    const ac = new AbortController();
    const res = await fetch(`${mainUrl}/api/generate`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ prompt: await page.inputValue('#prompt'), threshold: 1, max_tokens: 2000 }),
    });
    const reader = res.body.getReader();
    let got = '';
    while ((got.match(/event: token/g) || []).length < 2) {
      const { value, done } = await reader.read();
      if (done) break;
      got += new TextDecoder().decode(value);
    }
    ac.abort();
    await sleep(800);
    const stop = await rawRequest(`${mainUrl}/api/stop`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': 2 }, body: '{}',
    });
    check('a closed stream cancels the generation', stop.status === 200 && JSON.parse(stop.body).stopped === false, stop.body);
  });

  await scenario('conversation: three turns, each reusing the one before', async () => {
    const sent = [];  // the messages each turn sent
    const listen = (r) => {
      if (r.url().endsWith('/api/generate')) sent.push(JSON.parse(r.postData() || '{}'));
    };
    page.on('request', listen);
    await page.setChecked('#chat', true);
    check('the box asks for a message', await text(page, '#prompt-label') === 'Message');
    check('a new conversation starts empty', await count(page, '#text .msg') === 0 && await text(page, '#st-conv') === '–');
    await page.selectOption('#mode', 'joint');
    await page.setChecked('#pipeline', true);
    await page.fill('#threshold', '0.99');
    await page.fill('#max-tokens', '16');
    const questions = ['What would you use a tharko for?', 'Where would you keep it?', 'Who would want one?'];
    const turns = [];  // per turn: {tokens, routed, prompt, prefilled, reused}
    for (const [k, q] of questions.entries()) {
      await page.fill('#prompt', q);
      await run(page);
      check(`turn ${k + 1}: the box is cleared`, await page.inputValue('#prompt') === '');
      const stats = await text(page, '.msg-assistant:last-child .msg-stats');
      const m = stats.match(/^(\d+) tokens · (\d+) from the LLM.* · prompt (\d+) \((\d+) prefilled, (\d+) reused\)/);
      check(`turn ${k + 1}: per-message statistics`, !!m, stats);
      if (m) turns.push({ tokens: +m[1], routed: +m[2], prompt: +m[3], prefilled: +m[4], reused: +m[5] });
      const shown = await count(page, '.msg-assistant:last-child .tok');
      check(`turn ${k + 1}: the answer's tokens are in its message`, m && shown === +m[1], `${shown} shown, ${m && m[1]} counted`);
    }
    check('three user and three assistant messages', await count(page, '#text .msg-user') === 3 &&
          await count(page, '#text .msg-assistant') === 3);
    check('the user messages say what was sent', JSON.stringify(await page.$$eval('.msg-user .msg-body', (ms) => ms.map((m) => m.textContent))) ===
          JSON.stringify(questions));
    check('each turn sent the whole conversation', sent.map((b) => (b.messages || []).length).join(',') === '1,3,5',
          sent.map((b) => (b.messages || []).length).join(','));
    const second = sent[1] && sent[1].messages;
    const firstAnswer = await page.$$eval('.msg-assistant', (ms) => [...ms[0].querySelectorAll('.tok:not(.tok-end)')].map((t) => t.textContent).join(''));
    check('the answer sent back is the one shown', second && second[1].role === 'assistant' && second[1].content === firstAnswer,
          JSON.stringify(second && second[1]));
    check('LLM tokens red in the messages', await count(page, '.msg-assistant .tok-llm') > 0);
    for (let k = 1; k < turns.length; ++k) {
      const before = turns[k - 1].prompt + turns[k - 1].tokens;
      check(`turn ${k + 1} reused the conversation so far`, turns[k].reused >= before - 4,
            `${turns[k].reused} reused of ${turns[k].prompt}; the previous turn held ${before}`);
      check(`turn ${k + 1} prefilled only its new part`, turns[k].prefilled <= turns[k].prompt - before + 4,
            `${turns[k].prefilled} prefilled`);
    }
    const conv = await text(page, '#st-conv');
    const sum = (f) => turns.reduce((a, t) => a + t[f], 0);
    check('conversation statistics', conv === `3 turns: ${sum('tokens')} tokens, ${sum('routed')} from the LLM; prompt ` +
          `${sum('prefilled')} prefilled, ${sum('reused')} reused`, conv);
    await page.screenshot({ path: `${artifacts}/ui-chat.png`, fullPage: true });
    console.log(`    screenshot: ${artifacts}/ui-chat.png`);
    await page.click('#new-conv');
    check('new conversation clears it', await count(page, '#text .msg') === 0 && await text(page, '#st-conv') === '–');
    await page.fill('#prompt', questions[0]);
    await run(page);
    check('and the next turn sends one message', sent.length === 4 && sent[3].messages.length === 1,
          sent.length + ' requests');
    page.off('request', listen);
    await page.setChecked('#chat', false);
    check('back to single prompts', await text(page, '#prompt-label') === 'Prompt');
  });

  check('no request left the page\'s origin', outside.length === 0, outside.join(' '));
  check('no uncaught page errors', pageErrors.length === 0, pageErrors.join(' | '));

  await scenario('LLM server down: FALLBACK tokens and errors', async () => {
    const down = await context.newPage();
    down.on('pageerror', (e) => pageErrors.push(e.message));
    await down.goto(downUrl);
    await down.waitForSelector('#status[data-state="ready"]', { timeout: 15000 });
    check('warning about the server shown', await down.locator('#warning').isVisible() &&
          /127\.0\.0\.1:1/.test(await text(down, '#warning')), await text(down, '#warning'));
    await down.selectOption('#mode', 'joint');
    await down.fill('#threshold', '0.99');
    await down.fill('#max-tokens', '40');
    await run(down);
    const fb = await count(down, '#text .tok-fallback');
    check('FALLBACK tokens marked', fb > 0, `${fb}`);
    check('no LLM tokens', await count(down, '#text .tok-llm') === 0);
    const bg = await down.locator('#text .tok-fallback').first().evaluate((e) => getComputedStyle(e).backgroundColor);
    check('FALLBACK tokens on yellow', bg === 'rgb(255, 241, 168)', bg);
    const fbText = await text(down, '#st-fallbacks');
    check('fallbacks counted', parseInt(fbText, 10) === fb, fbText);
    check('why they fell back is shown', /unreachable/.test(fbText), fbText);
    const tip = await down.locator('#text .tok-fallback').first().getAttribute('title');
    check('a FALLBACK token says its call failed', /the LLM call failed: /.test(tip || ''), tip);
    await down.screenshot({ path: `${artifacts}/ui-fallback.png`, fullPage: true });
    await down.selectOption('#mode', 'large_only');
    await run(down, 'error');
    check('large_only without a server: error shown', /generation failed: LLM/.test(await text(down, '#error-text')),
          await text(down, '#error-text'));
    check('no uncaught page errors (second server)', pageErrors.length === 0, pageErrors.join(' | '));
  });
} finally {
  await browser.close();
}

console.log(`browser test took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`ui_browser_test: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
