// TLR's worker (module worker): the SLM, its router and the decoder run here, in WebAssembly
// (tlr.mjs / tlr.wasm from `make wasm`; tlr-scalar.* without SIMD, tlr-threads.* on several cores
// where the page is cross-origin isolated); only the tokens the router doubts go to the LLM
// behind `tlr serve`, through synchronous XMLHttpRequests (allowed in workers: the thread that
// calls waits in the request as a native client's thread would; wasm_glue.cc).
// Driven by tlr.js over postMessage: {id, op, ...} in, {id, ok, result | error} and
// {id, token} / {id, progress} out. The worker stays usable after any error.
const CACHE = 'tlr-models-v1';
let M = null;            // the WebAssembly module
let device = 0, llm = 0; // handles
let current = 0;         // the request whose tokens are streaming
let api = null;

function post(msg) { self.postMessage(msg); }

// The build for this browser: WebAssembly SIMD where it validates (a module using one v128
// instruction), else the scalar build (slower). `simd: false` asks for the scalar one. Where the
// page is cross-origin isolated (served with COOP/COEP, so SharedArrayBuffer exists) the threaded
// SIMD build (tlr-threads.*) runs the SLM on several cores; `threads: 1` asks for the one-thread
// build, `threads: N` caps the count (default: the cores the browser reports, at most 8).
const HAS_SIMD = WebAssembly.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10,
                                                      10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]));
const ISOLATED = self.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function';
const MAX_THREADS = 8;  // = the pool the threaded build starts (CMake: TLR_WASM_THREADS)
let build = '', nThreads = 1;
let stopFlag = null;      // Int32Array on shared memory: the page sets [0] to stop the running generation

async function init(simd, threads) {
  if (M) return;
  const cores = Math.min(navigator.hardwareConcurrency || 1, MAX_THREADS);
  const wanted = threads === undefined || threads === null ? cores : Math.max(1, Math.min(threads | 0, cores));
  build = HAS_SIMD && simd !== false ? (ISOLATED && wanted > 1 ? 'threads' : 'simd') : 'scalar';
  const file = { threads: './tlr-threads.mjs', simd: './tlr.mjs', scalar: './tlr-scalar.mjs' }[build];
  try {
    const { default: createTlrModule } = await import(file);
    nThreads = build === 'threads' ? wanted : 1;
    const created = createTlrModule({
      tlrOnToken: (t) => { post({ id: current, token: t }); return stopFlag && Atomics.load(stopFlag, 0) ? 1 : 0; },
      print: (s) => console.log(s),
      printErr: (s) => console.warn(s),
    });
    // The threaded build starts its pool of workers first: one that cannot start (a missing
    // tlr-threads.worker.js, no memory for shared memory) would keep it waiting for ever.
    M = build !== 'threads' ? await created : await Promise.race([created, new Promise((_, reject) =>
      setTimeout(() => reject(new Error('its threads did not start within 30 s')), 30000))]);
  } catch (e) {
    if (build === 'threads') {  // a site without a working threaded build still works, on one thread
      console.warn(`TLR: the threaded build failed (${e.message || e}); using one thread`);
      M = null;
      return init(simd, 1);
    }
    throw new Error(build === 'simd' ? `TLR's WebAssembly module could not be loaded: ${e.message || e}`
                                     : 'this browser has no WebAssembly SIMD and the site serves no scalar build ' +
                                       `(tlr-scalar.mjs: make wasm builds it): ${e.message || e}`);
  }
  api = {
    deviceOpen: M.cwrap('tlrw_device_open', 'number', ['string']),
    llmOpen: M.cwrap('tlrw_llm_open', 'number', ['string']),
    generate: M.cwrap('tlrw_generate', 'number', ['number', 'number', 'string']),
    lastError: M.cwrap('tlrw_last_error', 'string', []),
    lastStats: M.cwrap('tlrw_last_stats', 'string', []),
    alloc: M.cwrap('tlrw_alloc', 'number', ['number']),
    addFile: M.cwrap('tlrw_add_file', null, ['string', 'number', 'number']),
    removeFile: M.cwrap('tlrw_remove_file', null, ['string']),
    deviceFree: M.cwrap('tlr_device_free', null, ['number']),
    llmFree: M.cwrap('tlr_llm_free', null, ['number']),
  };
}

// Whether a server answers this page: 'ok', 'origin' (it answers, but does not allow this
// page's origin: a no-cors request gets through where a CORS one is blocked) or 'unreachable'.
async function probe(server) {
  const health = new URL('health', server.endsWith('/') ? server : server + '/').toString();
  try {
    await fetch(health, { cache: 'no-store' });
    return 'ok';
  } catch (e) {
    try {
      await fetch(health, { mode: 'no-cors', cache: 'no-store' });
      return 'origin';
    } catch (e2) {
      return 'unreachable';
    }
  }
}

// A model or router: from the browser's Cache Storage when this URL was fetched before, else
// downloaded (progress reported) and kept there. Files the user picked are used as they are.
async function fetchModel(id, what, src) {
  if (typeof src !== 'string') return { blob: src, cached: false, bytes: src.size };
  const cache = 'caches' in self ? await caches.open(CACHE) : null;
  let res = cache ? await cache.match(src) : null;
  if (res) return { blob: await res.blob(), cached: true, bytes: Number(res.headers.get('content-length')) || 0 };
  let r;
  try {
    r = await fetch(src);
  } catch (e) {
    throw new Error(`the ${what} at ${src} could not be downloaded: ${e.message || e}`);
  }
  if (!r.ok) throw new Error(`the ${what} at ${src} could not be downloaded: HTTP ${r.status} ${r.statusText}`);
  const total = Number(r.headers.get('content-length')) || 0;
  const reader = r.body.getReader();
  const parts = [];
  let done = 0;
  for (;;) {
    const { done: end, value } = await reader.read();
    if (end) break;
    parts.push(value);
    done += value.length;
    post({ id, progress: { what, url: src, done, total } });
  }
  const blob = new Blob(parts);
  let kept = false, why = '';
  if (cache) {
    try {  // a full or private-mode store keeps nothing: the next visit downloads again
      await cache.put(src, new Response(blob, { headers: { 'content-length': String(blob.size) } }));
      kept = true;
    } catch (e) {
      why = String(e && e.message || e);
    }
  }
  return { blob, cached: false, bytes: blob.size, kept, why };
}

// Copies a Blob into WebAssembly memory in slices (one copy, no second one in JavaScript) and
// names it for the C side.
async function addFile(name, blob) {
  const ptr = api.alloc(blob.size);
  if (!ptr) throw new Error(`not enough memory for ${name} (${(blob.size / 1048576).toFixed(0)} MiB)`);
  api.addFile(name, ptr, blob.size);  // owned by the C side from here: removing the name frees it
  for (let at = 0; at < blob.size; at += 16 << 20) {
    const part = new Uint8Array(await blob.slice(at, at + (16 << 20)).arrayBuffer());
    M.HEAPU8.set(part, ptr + at);  // HEAPU8 is fetched again each time: memory may have grown
  }
}

let loads = 0;
async function load(id, { slm, router, simd, threads }) {
  await init(simd, threads);
  const got = {};
  for (const [what, src] of [['SLM', slm], ['router', router]]) {
    if (what === 'router' && typeof src === 'string' && !src.includes('/') && !src.includes('.')) continue;  // a built-in kind
    got[what] = await fetchModel(id, what, src);
    const head = new Uint8Array(await got[what].blob.slice(0, 4).arrayBuffer());
    if (String.fromCharCode(...head) !== 'GGUF') {
      throw new Error(`the ${what} (${typeof src === 'string' ? src : src.name}) is not a GGUF file`);
    }
  }
  if (device) api.deviceFree(device);
  device = 0;
  const names = {};
  try {
    for (const [what, g] of Object.entries(got)) {
      names[what] = `/models/${++loads}/${what === 'SLM' ? 'slm' : 'router'}.gguf`;
      await addFile(names[what], g.blob);
    }
    device = api.deviceOpen(JSON.stringify({ slm: names.SLM, router: names.router || router, n_threads: nThreads }));
  } finally {
    for (const name of Object.values(names)) api.removeFile(name);  // the device holds what it uses
  }
  if (!device) {  // said with the URLs or file names the page gave, not the names inside
    let msg = api.lastError();
    for (const [what, name] of Object.entries(names)) {
      const src = what === 'SLM' ? slm : router;
      msg = msg.split(name).join(typeof src === 'string' ? src : src.name || what);
    }
    throw new Error(msg);
  }
  const each = (f) => Object.fromEntries(Object.entries(got).map(([k, g]) => [k, f(g)]));
  const notKept = Object.entries(got).filter(([, g]) => !g.cached && !g.kept);
  const what = { threads: `simd, ${nThreads} threads`, simd: 'simd, 1 thread', scalar: 'scalar, 1 thread' }[build];
  return { build: HAS_SIMD ? what : 'scalar, 1 thread (this browser has no WebAssembly SIMD)', threads: nThreads,
           cached: each((g) => g.cached), bytes: each((g) => g.bytes),
           notice: notKept.length ? `not kept in the browser's storage (the next visit downloads again): ` +
                                    notKept.map(([k, g]) => `${k}${g.why ? ': ' + g.why : ''}`).join('; ') : '' };
}

async function connect(id, params) {
  await init();
  if (llm) api.llmFree(llm);
  llm = 0;
  if (!params || !params.server) return {};
  const reach = await probe(params.server);
  if (reach === 'origin') {
    throw new Error(`the server at ${params.server} does not allow pages of ${self.location.origin}: ` +
                    `start it with tlr serve --cors-origin ${self.location.origin}`);
  }
  llm = api.llmOpen(JSON.stringify(params));
  if (!llm) throw new Error(api.lastError());
  return { reachable: reach === 'ok' };
}

function generate(id, request, stop) {
  if (!device) throw new Error('no model loaded (load the SLM and router first)');
  current = id;
  stopFlag = stop || null;
  const rc = api.generate(device, llm, JSON.stringify(request));
  if (rc !== 0) throw new Error(api.lastError());
  return JSON.parse(api.lastStats());
}

self.onmessage = async (e) => {
  const { id, op, ...args } = e.data;
  try {
    let result;
    if (op === 'load') result = await load(id, args);
    else if (op === 'connect') result = await connect(id, args);
    else if (op === 'generate') result = generate(id, args.request, args.stop);
    else throw new Error('unknown operation ' + op);
    post({ id, ok: true, result });
  } catch (err) {
    if (!(err instanceof Error) || err.constructor !== Error) console.error(err);  // not one of ours: the stack helps
    post({ id, ok: false, error: String(err && err.message || err) });
  }
};
