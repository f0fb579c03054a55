// The checks of the in-tab browser test (see wasm_test.sh): TLR's WebAssembly build in Debian's
// headless Chromium against real `tlr serve` processes on loopback.
// Usage: node wasm_test.mjs TLR WASM_WEB_DIR DEMO_DIR CHROMIUM SOURCE_WEB_DIR
import http from 'node:http';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join, extname } from 'node:path';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';

const [tlr, wasmDir, demoDir, executablePath, srcWebDir] = process.argv.slice(2);
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
const statics = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  hits.set(path, (hits.get(path) || 0) + 1);
  let file = null, body = null;
  if (path === '/') body = page;
  else if (path === '/tlr.js' || path === '/tlr_worker.js') file = join(srcWebDir, path);
  else if (path === '/tlr.mjs' || path === '/tlr.wasm') file = join(wasmDir, path);
  else if (path === '/models/not-a-model.gguf') body = 'This is not a model, it is a text file.\n';
  else if (path.startsWith('/models/')) file = join(demoDir, path.slice('/models/'.length));
  if (file && existsSync(file)) body = readFileSync(file);
  if (body === null) { res.writeHead(404, { 'content-type': 'text/plain' }); res.end('not found'); return; }
  res.writeHead(200, { 'content-type': types[extname(path)] || 'text/html', 'content-length': Buffer.byteLength(body) });
  res.end(body);
});
await new Promise((r) => statics.listen(0, '127.0.0.1', r));
const origin = `http://127.0.0.1:${statics.address().port}`;

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
const server = await serve(['--cors-origin', origin]);
const closed = await serve([]);  // allows no origin
console.log(`page at ${origin}, tlr serve at ${server} (allows it) and ${closed} (does not)`);

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
    await attempt('origin', () => tlr.connect({ server: closed }));
    await tlr.load({ slm: '/models/slm.gguf', router: '/models/router.gguf' });
    let n = 0;
    for await (const t of tlr.generate('Question: Where does a fexko live?\n', { mode: 'small_only', maxTokens: 8 })) n++;
    out.after = n;
    return out;
  }, { closed });
  check('a model URL that fails says so', /could not be downloaded: HTTP 404/.test(errors.missing), errors.missing);
  check('a file that is not GGUF says so', /is not a GGUF file/.test(errors.notgguf), errors.notgguf);
  check('a server that refuses the origin says what to do', /--cors-origin/.test(errors.origin), errors.origin);
  check('the worker stays usable after the errors', errors.after > 0, `${errors.after} tokens`);
} finally {
  await browser.close();
  for (const c of children) c.kill();
  statics.close();
  rmSync(work, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
