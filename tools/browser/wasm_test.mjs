// The checks of the in-tab browser test (see wasm_test.sh): TLR's WebAssembly build in Debian's
// headless Chromium against real `tlr serve` processes on loopback.
// Usage: node wasm_test.mjs TLR WASM_WEB_DIR DEMO_DIR CHROMIUM SOURCE_WEB_DIR
import http from 'node:http';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join, extname } from 'node:path';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';

const [tlr, wasmDir, demoDir, executablePath, srcWebDir, ...rest] = process.argv.slice(2);
// --bench FILE.gguf...: instead of the checks, the SLM's decode speed in the tab against the
// native build at one thread (reported, not asserted).
const benchFiles = rest[0] === '--bench' ? rest.slice(1) : [];
const N_QUESTIONS = 20, MAX_TOKENS = 40;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) { passed++; console.log(`ok   ${name}${detail ? ' (' + detail + ')' : ''}`); }
  else { failed++; console.log(`FAIL ${name}${detail ? ': ' + detail : ''}`); }
}

// The page's origin: a static server for the module, the WebAssembly build and the demo files.
const hits = new Map();
const types = { '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm',
                '.html': 'text/html', '.gguf': 'application/octet-stream' };
const page = `<!doctype html><meta charset="utf-8"><title>TLR in the tab</title><p id="out">ready</p>`;
// The same files from a second origin that is cross-origin isolated (COOP/COEP on every reply),
// where the worker takes the threaded build.
const isolation = { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp',
                    'cross-origin-resource-policy': 'same-origin' };
const serveFile = (isolated) => (req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  hits.set(path, (hits.get(path) || 0) + 1);
  let file = null, body = null;
  if (path === '/') body = page;
  else if (path === '/favicon.ico') body = '';
  else if (path.startsWith('/bench/')) file = benchFiles[Number(path.slice('/bench/'.length))];
  else if (path === '/tlr.js' || path === '/tlr_worker.js') file = join(srcWebDir, path);
  else if (/^\/tlr(-scalar|-threads)?\.(mjs|wasm)$|^\/tlr-threads\.worker\.js$/.test(path)) file = join(wasmDir, path);
  else if (path === '/models/not-a-model.gguf') body = 'This is not a model, it is a text file.\n';
  else if (path === '/models/truncated.gguf') body = readFileSync(join(demoDir, 'slm.gguf')).subarray(0, 700000);
  else if (path.startsWith('/models/')) file = join(demoDir, path.slice('/models/'.length));
  if (file && existsSync(file)) body = readFileSync(file);
  if (body === null) { res.writeHead(404, { 'content-type': 'text/plain' }); res.end('not found'); return; }
  res.writeHead(200, { 'content-type': types[extname(path)] || 'text/html', 'content-length': Buffer.byteLength(body),
                       ...(isolated ? isolation : {}) });
  res.end(body);
};
const statics = http.createServer(serveFile(false)), isolatedStatics = http.createServer(serveFile(true));
await new Promise((r) => statics.listen(0, '127.0.0.1', r));
await new Promise((r) => isolatedStatics.listen(0, '127.0.0.1', r));
const origin = `http://127.0.0.1:${statics.address().port}`;
const isolatedOrigin = `http://127.0.0.1:${isolatedStatics.address().port}`;

// `tlr serve` on an ephemeral port; resolves to its URL.
const children = [];
function serve(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(tlr, ['serve', '--port', '0', '-t', '1', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(p);
    let out = '', err = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http\S+)/);
      if (m) resolve(m[1]);
    });
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => reject(new Error(`tlr serve exited (${code}): ${err}`)));
  });
}
if (benchFiles.length) {
  await bench();
  statics.close();
  isolatedStatics.close();
  process.exit(0);
}
const server = await serve(['--cors-origin', origin, '--cors-origin', isolatedOrigin]);
const closed = await serve([]);  // allows no origin
console.log(`page at ${origin}, tlr serve at ${server} (allows it) and ${closed} (does not)`);

// Decode tokens/s of each file as the SLM (router maxprob, small_only, greedy, 64 tokens), in the
// tab (WebAssembly SIMD; one thread, and the threaded build on a cross-origin-isolated page with
// as many threads as the machine has cores) and natively with the same thread counts; medians
// of 3 each.
async function bench() {
  const prompt = 'Question: Where does a fexko live? Answer:';
  const cores = (await import('node:os')).availableParallelism();
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  const context = await browser.newContext();
  const tabs = [await context.newPage(), await context.newPage()];
  await tabs[0].goto(origin + '/');
  await tabs[1].goto(isolatedOrigin + '/');
  const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const tabRate = async (tab, url, threads) => 1000 / median(await tab.evaluate(async ({ url, prompt, threads }) => {
    const { Tlr } = await import('/tlr.js');
    const tlr = new Tlr();
    await tlr.load({ slm: url, router: 'maxprob', threads });
    const tbt = [];
    for (let r = 0; r < 3; ++r) {
      for await (const t of tlr.generate(prompt, { mode: 'small_only', maxTokens: 64 })) void t;
      tbt.push(tlr.stats.tbt_ms);
    }
    tlr.terminate();
    return tbt;
  }, { url, prompt, threads }));
  const nativeRate = (file, threads) => {
    const tbt = [];
    for (let r = 0; r < 3; ++r) {
      const out = spawnSync(tlr, ['generate', '--slm', file, '--router', 'maxprob', '--mode', 'small_only',
                                  '-n', '64', '-t', String(threads), '-p', prompt], { encoding: 'utf8' });
      const m = (out.stdout + out.stderr).match(/TBT ([\d.]+) ms/);
      if (!m) throw new Error('no TBT in tlr generate output: ' + out.stderr);
      tbt.push(Number(m[1]));
    }
    return 1000 / median(tbt);
  };
  console.log(`| model | threads | tab tok/s | native tok/s | tab / native |`);
  console.log('|---|---:|---:|---:|---:|');
  for (let i = 0; i < benchFiles.length; ++i) {
    for (const threads of cores > 1 ? [1, cores] : [1]) {
      const a = await tabRate(tabs[threads > 1 ? 1 : 0], `/bench/${i}`, threads), b = nativeRate(benchFiles[i], threads);
      console.log(`| ${benchFiles[i].split('/').pop()} | ${threads} | ${a.toFixed(1)} | ${b.toFixed(1)} | ${(a / b).toFixed(2)}x |`);
    }
  }
  await browser.close();
}

// The test questions as the demo prompts them.
const questions = readFileSync(join(demoDir, 'test.jsonl'), 'utf8').split('\n').filter(Boolean).slice(0, N_QUESTIONS)
  .map((l) => JSON.parse(l))
  .map((r) => 'Question: ' + r.question + '\n' + r.choices.label.map((l, i) => `${l}. ${r.choices.text[i]}\n`).join(''));

// The native build's tokens for each question (tlr generate --server, greedy, one thread).
const work = mkdtempSync(join(tmpdir(), 'tlr_wasm_test_'));
function native(prompt, pipeline) {
  const trace = join(work, 'trace.jsonl');
  const r = spawnSync(tlr, ['generate', '--server', server, '-p', prompt, '-n', String(MAX_TOKENS), '-t', '1',
                            '--pipeline', pipeline ? 'on' : 'off', '--trace', trace], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tlr generate failed: ${r.stderr}`);
  return readFileSync(trace, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    .filter((t) => t.id !== undefined).map((t) => `${t.id}/${t.source}`);
}

// What a page ships: the single-thread .wasm (and gzipped), and the JavaScript it loads.
{
  const { gzipSync } = await import('node:zlib');
  const wasm = readFileSync(join(wasmDir, 'tlr.wasm'));
  const gz = gzipSync(wasm, { level: 9 }).length;
  const js = ['tlr.mjs'].map((f) => readFileSync(join(wasmDir, f)).length)
    .concat(['tlr.js', 'tlr_worker.js'].map((f) => readFileSync(join(srcWebDir, f)).length)).reduce((a, b) => a + b);
  check('the .wasm is at most 3 MB (gzip 1.2 MB)', wasm.length <= 3e6 && gz <= 1.2e6, `${wasm.length} bytes, gzip ${gz}`);
  check('the page\'s JavaScript is at most 100 KB', js <= 100e3, `${js} bytes`);
}

const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
try {
  const context = await browser.newContext();
  const tab = await context.newPage();
  tab.on('console', (m) => { if (m.type() === 'error') console.log('  [page]', m.text()); });
  await tab.goto(origin + '/');

  // Load from URLs (downloaded), connect, generate every question blocking and pipelined.
  const t0 = Date.now();
  const run = await tab.evaluate(async ({ server, questions, maxTokens }) => {
    const { Tlr } = await import('/tlr.js');
    const tlr = new Tlr();
    window.tlr = tlr;
    const progress = [];
    const loaded = await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf',
                                    onProgress: (p) => progress.push(p.done) });
    await tlr.connect({ server });
    const out = { loaded, progress: progress.length, blocking: [], pipelined: [], stats: [] };
    for (const pipeline of [false, true]) {
      for (const q of questions) {
        const toks = [];
        for await (const t of tlr.generate(q, { maxTokens, pipeline })) toks.push(`${t.id}/${t.source}`);
        (pipeline ? out.pipelined : out.blocking).push(toks);
        out.stats.push(tlr.stats);
      }
    }
    return out;
  }, { server, questions, maxTokens: MAX_TOKENS });
  const tabSeconds = (Date.now() - t0) / 1000;
  check('models downloaded with progress', run.progress > 0 && !run.loaded.cached.SLM, JSON.stringify(run.loaded));
  let sameBlocking = 0, samePipelined = 0, routed = 0;
  for (let i = 0; i < questions.length; ++i) {
    const want = [native(questions[i], false), native(questions[i], true)];
    const b = JSON.stringify(run.blocking[i]) === JSON.stringify(want[0]);
    const p = JSON.stringify(run.pipelined[i]) === JSON.stringify(want[1]);
    sameBlocking += b; samePipelined += p;
    routed += run.blocking[i].filter((t) => t.endsWith('/LLM')).length;
    if (!b) console.log(`  q${i} blocking: tab ${run.blocking[i].join(' ')}\n           native ${want[0].join(' ')}`);
    if (!p) console.log(`  q${i} pipelined: tab ${run.pipelined[i].join(' ')}\n           native ${want[1].join(' ')}`);
  }
  check(`${questions.length} questions blocking: the tab's tokens equal tlr generate --server`, sameBlocking === questions.length,
        `${sameBlocking}/${questions.length}, ${routed} LLM tokens`);
  check(`${questions.length} questions pipelined: the tab's tokens equal tlr generate --server`, samePipelined === questions.length,
        `${samePipelined}/${questions.length}`);
  check('routed tokens came from the server', routed > 0 && run.stats.every((s) => s.fallbacks === 0),
        `${routed} routed, LLM work ${run.stats.reduce((a, s) => a + s.llm_prefilled, 0)} prefilled / ${run.stats.reduce((a, s) => a + s.llm_generated, 0)} generated`);
  console.log(`  (${(2 * questions.length)} generations in the tab in ${tabSeconds.toFixed(1)} s)`);

  // The scalar build (what a browser without WebAssembly SIMD gets): the same tokens.
  const scalar = await tab.evaluate(async ({ server, questions, maxTokens }) => {
    const { Tlr } = await import('/tlr.js');
    const tlr = new Tlr();
    const loaded = await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf', simd: false });
    await tlr.connect({ server });
    const out = [];
    for (const q of questions) {
      const toks = [];
      for await (const t of tlr.generate(q, { maxTokens, pipeline: false })) toks.push(`${t.id}/${t.source}`);
      out.push(toks);
    }
    tlr.terminate();
    return { build: loaded.build, out };
  }, { server, questions: questions.slice(0, 5), maxTokens: MAX_TOKENS });
  const sameScalar = scalar.out.filter((toks, i) => JSON.stringify(toks) === JSON.stringify(run.blocking[i])).length;
  check('the scalar build (no WebAssembly SIMD) gives the same tokens', scalar.build.startsWith('scalar') && sameScalar === 5,
        `${scalar.build}, ${sameScalar}/5 questions`);

  // A cross-origin-isolated page: the threaded build, the same tokens (blocking, and pipelined
  // with the LLM calls on a thread of their own).
  {
    const iso = await context.newPage();
    iso.on('console', (m) => { if (m.type() === 'error') console.log('  [isolated page]', m.text()); });
    await iso.goto(isolatedOrigin + '/');
    const threaded = await iso.evaluate(async ({ server, questions, maxTokens }) => {
      const { Tlr } = await import('/tlr.js');
      const tlr = new Tlr();
      const loaded = await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf', threads: 2 });
      await tlr.connect({ server });
      const out = { isolated: self.crossOriginIsolated, loaded, blocking: [], pipelined: [] };
      for (const pipeline of [false, true]) {
        for (const q of questions) {
          const toks = [];
          for await (const t of tlr.generate(q, { maxTokens, pipeline })) toks.push(`${t.id}/${t.source}`);
          (pipeline ? out.pipelined : out.blocking).push(toks);
        }
      }
      window.isoTlr = tlr;
      return out;
    }, { server, questions: questions.slice(0, 5), maxTokens: MAX_TOKENS });
    // A stop there is cooperative: AbortError, the stats of what was generated, the same worker
    // (so no second session on the server).
    const sessions = async () => (await (await fetch(server + '/health')).json()).sessions;
    const before = await sessions();
    const stop = await iso.evaluate(async ({ q }) => {
      const ctl = new AbortController();
      let n = 0, error = '';
      try {
        for await (const t of window.isoTlr.generate(q, { maxTokens: 40, threshold: 1, signal: ctl.signal })) {
          void t;
          if (++n === 2) ctl.abort();
        }
      } catch (e) {
        error = e.name;
      }
      const stats = window.isoTlr.stats;
      for await (const t of window.isoTlr.generate(q, { maxTokens: 4, threshold: 1 })) void t;
      window.isoTlr.terminate();
      return { n, error, stats };
    }, { q: questions[0] });
    const after = await sessions();
    check('a stop on a cross-origin-isolated page ends the generation in the same worker, its stats kept',
          stop.error === 'AbortError' && stop.stats && stop.stats.stop === 'callback' &&
          after === before, `${stop.error}, stop ${stop.stats && stop.stats.stop} after ${stop.stats && stop.stats.generated} tokens; ` +
          `server sessions ${before} -> ${after}`);
    const same = (a, b) => a.filter((toks, i) => JSON.stringify(toks) === JSON.stringify(b[i])).length;
    const sb = same(threaded.blocking, run.blocking), sp = same(threaded.pipelined, run.pipelined);
    check('a cross-origin-isolated page runs the threaded build, with the same tokens',
          threaded.isolated && threaded.loaded.threads === 2 && sb === 5 && sp === 5,
          `${threaded.loaded.build}; ${sb}/5 blocking, ${sp}/5 pipelined`);
    await iso.close();
  }

  // The web UI in tab mode: `tlr serve --web` serves the page, the SLM runs in the tab (the
  // threaded build: the page is cross-origin isolated) and the doubted tokens go to that server,
  // which wants an API key: the page asks for it. The tokens equal `tlr generate --server`.
  {
    const key = 'tab-test-key';
    const webServer = await serve(['--web', wasmDir, '--accept-key', key]);
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') console.log('  [ui page]', m.text()); });
    await page.goto(webServer + '/');
    await page.waitForFunction(() => ['ready', 'error'].includes(document.getElementById('status').dataset.state),
                               null, { timeout: 120000 });
    const shown = await page.evaluate(() => ({ state: document.getElementById('status').dataset.state,
                                               models: document.getElementById('models').textContent,
                                               error: document.getElementById('error-text').textContent,
                                               keyBox: !document.getElementById('key-box').hidden }));
    await page.fill('#api-key', key);
    const prompt = await page.inputValue('#prompt');
    await page.click('#start');
    await page.waitForFunction(() => ['done', 'error', 'stopped'].includes(document.getElementById('status').dataset.state),
                               null, { timeout: 120000 });
    const got = await page.evaluate(() => ({ toks: ui.tokens.map((t) => `${t.id}/${t.source}`),
                                             status: document.getElementById('status').textContent,
                                             error: document.getElementById('error-text').textContent,
                                             threshold: Number(document.getElementById('threshold').value),
                                             maxTokens: document.getElementById('max-tokens').value }));
    const r = spawnSync(tlr, ['generate', '--server', webServer, '--server-key', key, '-p', prompt, '-n', got.maxTokens,
                              '--threshold', String(got.threshold), '--trace', join(work, 'ui.jsonl')], { encoding: 'utf8' });
    const want = r.status === 0 ? readFileSync(join(work, 'ui.jsonl'), 'utf8').split('\n').filter(Boolean)
      .map((l) => JSON.parse(l)).filter((t) => t.id !== undefined).map((t) => `${t.id}/${t.source}`) : [];
    const routedUi = got.toks.filter((t) => t.endsWith('/LLM')).length;
    check('tlr serve --web: the page runs the SLM in the tab (threaded build) and asks for the key',
          shown.state === 'ready' && /in this tab \(simd, \d+ threads/.test(shown.models) && shown.keyBox,
          shown.error || shown.models);
    check('tlr serve --web: the page\'s tokens equal tlr generate --server', got.toks.length > 0 &&
          JSON.stringify(got.toks) === JSON.stringify(want) && routedUi > 0,
          `${got.toks.length} tokens, ${routedUi} from the LLM; ${got.status}${got.error ? '; ' + got.error : ''}` +
          (JSON.stringify(got.toks) === JSON.stringify(want) ? '' : `\n  page   ${got.toks.join(' ')}\n  native ${want.join(' ')} ${r.stderr}`));
    await page.close();
  }

  // A conversation of three turns: each later turn reuses the tab's KV cache.
  const conv = await tab.evaluate(async () => {
    const messages = [{ role: 'user', content: 'What would you use a tharko for?' }];
    const reused = [];
    for (let turn = 0; turn < 3; ++turn) {
      let text = '';
      for await (const t of window.tlr.generate({ messages }, { maxTokens: 24 })) text += t.text;
      reused.push([window.tlr.stats.prompt_reused, window.tlr.stats.prompt_tokens]);
      messages.push({ role: 'assistant', content: text }, { role: 'user', content: 'Tell me more.' });
    }
    return reused;
  });
  check('a 3-turn conversation reuses the tab\'s KV cache', conv[0][0] === 0 && conv[1][0] > 0 && conv[2][0] > conv[1][0],
        conv.map(([r, p]) => `${r}/${p} prompt tokens reused`).join(', '));

  // A second visit: the models come from the browser's storage, nothing is downloaded.
  const before = hits.get('/models/slm.gguf') || 0;
  await tab.reload();
  const second = await tab.evaluate(async () => {
    const { Tlr } = await import('/tlr.js');
    const tlr = new Tlr();
    const t0 = performance.now();
    const loaded = await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf' });
    return { loaded, ms: performance.now() - t0 };
  });
  check('a second page load starts from the browser\'s storage', second.loaded.cached.SLM && second.loaded.cached.router &&
        (hits.get('/models/slm.gguf') || 0) === before, `load ${second.ms.toFixed(0)} ms, ${before} downloads of the SLM in all`);

  // Errors a person can act on; the worker stays usable after each.
  const errors = await tab.evaluate(async ({ closed }) => {
    const { Tlr } = await import('/tlr.js');
    const tlr = new Tlr();
    const out = {};
    const attempt = async (name, fn) => { try { await fn(); out[name] = 'no error'; } catch (e) { out[name] = e.message; } };
    await attempt('missing', () => tlr.load({ slm: '/models/no-such.gguf', router: '/models/router.gguf' }));
    await attempt('notgguf', () => tlr.load({ slm: '/models/not-a-model.gguf', router: '/models/router.gguf' }));
    await attempt('truncated', () => tlr.load({ slm: '/models/truncated.gguf', router: '/models/router.gguf' }));
    await attempt('origin', () => tlr.connect({ server: closed }));
    const stop = new AbortController();
    stop.abort();
    await attempt('abort', async () => { for await (const t of tlr.generate('Question:', { mode: 'small_only', signal: stop.signal })) void t; });
    await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf' });
    await attempt('badvalue', async () => { for await (const t of tlr.generate('Question:', { threshold: 'high' })) void t; });
    let n = 0;
    for await (const t of tlr.generate('Question: Where does a fexko live?\n', { mode: 'small_only', maxTokens: 8 })) n++;
    out.after = n;
    return out;
  }, { closed });
  check('a model URL that fails says so', /could not be downloaded: HTTP 404/.test(errors.missing), errors.missing);
  check('a file that is not GGUF says so', /is not a GGUF file/.test(errors.notgguf), errors.notgguf);
  check('a truncated GGUF file says so', /SLM: gguf '\/models\/truncated.gguf'.*runs past the end of the file/.test(errors.truncated), errors.truncated);
  check('a server that refuses the origin says what to do', /--cors-origin/.test(errors.origin), errors.origin);
  check('a value of the wrong type is the request\'s error', /wrong type/.test(errors.badvalue), errors.badvalue);
  check('a stopped generation ends with an AbortError', /stopped/.test(errors.abort), errors.abort);
  check('the worker stays usable after the errors', errors.after > 0, `${errors.after} tokens`);
} finally {
  await browser.close();
  for (const c of children) c.kill();
  statics.close();
  isolatedStatics.close();
  rmSync(work, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
