// TLR in the browser (ES module): the SLM runs in the user's tab, in a worker (tlr_worker.js),
// and only the tokens its router doubts come from a `tlr serve` (started with
// --cors-origin <this page's origin>). Types: tlr.d.ts. Example:
//
//   import { Tlr } from './tlr.js';
//   const tlr = new Tlr();
//   await tlr.load({ slm: 'models/slm.gguf', router: 'models/router.gguf',
//                    onProgress: (p) => console.log(p.what, p.done, p.total) });
//   await tlr.connect({ server: 'http://127.0.0.1:8080', apiKey: 'k' });
//   for await (const tok of tlr.generate('Question: ...', { maxTokens: 64 })) show(tok.text, tok.source);
//   console.log(tlr.stats);   // prompt, generated, routed, the LLM's work, times
//
// Models come from URLs (downloaded once, then from the browser's Cache Storage) or from Files
// the user picked. One generation at a time; `signal` (an AbortSignal) stops one: the worker is
// then replaced (the models reload from the cache), since a WebAssembly thread cannot be
// interrupted from outside.

export class Tlr {
  constructor({ workerUrl = new URL('./tlr_worker.js', import.meta.url) } = {}) {
    this._workerUrl = workerUrl;
    this._next = 1;
    this._pending = new Map();
    this._loaded = null;
    this._connected = null;
    this.stats = null;
    // On a cross-origin-isolated page a stop is cooperative: a flag in shared memory that the
    // worker reads at each token, so the generation ends cleanly (its stats kept, the LLM
    // server's session closed in order); elsewhere the worker is replaced.
    this._cooperative = self.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function';
    this._start();
  }

  _start() {
    this._worker = new Worker(this._workerUrl, { type: 'module' });
    this._worker.onmessage = (e) => {
      const m = e.data;
      const p = this._pending.get(m.id);
      if (!p) return;
      if (m.token) p.onToken && p.onToken(m.token);
      else if (m.progress) p.onProgress && p.onProgress(m.progress);
      else {
        this._pending.delete(m.id);
        m.ok ? p.resolve(m.result) : p.reject(new Error(m.error));
      }
    };
    this._worker.onerror = (e) => {
      const err = new Error(`the TLR worker failed to start: ${e.message || 'see the console'}`);
      for (const p of this._pending.values()) p.reject(err);
      this._pending.clear();
    };
  }

  _call(op, args, hooks = {}) {
    const id = this._next++;
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject, ...hooks });
      this._worker.postMessage({ id, op, ...args });
    });
  }

  // Loads the SLM and its router (URLs or Files; router may also be a built-in kind:
  // "maxprob", "entropy"). Resolves to {build, threads, cached: {SLM, router}, bytes, notice}.
  // `simd: false` takes the scalar build (the one browsers without WebAssembly SIMD get). On a
  // cross-origin-isolated page (served with COOP/COEP headers) the SLM runs on up to `threads`
  // threads (default: the cores the browser reports, at most 8); `threads: 1` keeps one.
  async load({ slm, router, onProgress, simd, threads } = {}) {
    if (this._ready) await this._ready;
    if (!slm || !router) throw new Error('load needs slm and router (a URL or a File each)');
    const r = await this._call('load', { slm, router, simd, threads }, { onProgress });
    this._loaded = { slm, router, simd, threads };
    return r;
  }

  // The LLM behind a server: {server, apiKey, backend: 'tlr' | 'openai', timeoutS, retries,
  // model}. Without it (or with server unset) only mode 'small_only' works.
  async connect({ server, apiKey, backend = 'tlr', timeoutS, retries, model } = {}) {
    if (this._ready) await this._ready;
    const params = { server, api_key: apiKey, backend, timeout_s: timeoutS, retries, server_model: model };
    const r = await this._call('connect', params);
    this._connected = params;
    return r;
  }

  // Tokens after a prompt (text) or a conversation ({messages: [{role, content}]}), as an async
  // iterator of {id, text, source: 'SLM' | 'LLM' | 'FALLBACK', confidence, end, llm_error}.
  // Options: threshold, mode ('joint' | 'small_only' | 'large_only'), maxTokens, pipeline,
  // temperature, seed, chat, signal. this.stats holds the generation's stats afterwards (after
  // a stop, too, where the page is cross-origin isolated: stop "callback").
  async *generate(input, { threshold, mode = 'joint', maxTokens = 128, pipeline = true, temperature, seed, chat,
                           signal } = {}) {
    if (this._ready) await this._ready;
    const request = { mode, max_tokens: maxTokens, pipeline, temperature, seed, chat, threshold };
    if (typeof input === 'string') request.prompt = input;
    else if (input && Array.isArray(input.messages)) request.messages = input.messages;
    else throw new Error('generate takes a prompt string or {messages: [...]}');
    const queue = [];
    let wake = null, finished = false, failure = null;
    this.stats = null;
    const cooperative = this._cooperative;
    const stop = cooperative ? new Int32Array(new SharedArrayBuffer(4)) : null;  // this generation's flag
    const done = this._call('generate', { request, stop }, {
      onToken: (t) => { queue.push(t); if (wake) wake(); },
    }).then((stats) => { this.stats = stats; }, (e) => { if (!failure) failure = e; })
      .finally(() => { finished = true; if (wake) wake(); });
    const onAbort = () => {
      failure = new DOMException('the generation was stopped', 'AbortError');
      if (!cooperative) return this._restart();
      Atomics.store(stop, 0, 1);  // the worker ends it at its next token
      const stuck = setTimeout(() => { if (!finished) this._restart(); }, 3000);  // waiting in an LLM call
      done.finally(() => clearTimeout(stuck));
      if (wake) wake();
    };
    if (signal) {
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    try {
      for (;;) {
        while (queue.length && !failure) yield queue.shift();
        // A cooperative stop throws once the worker has ended (this.stats then holds its stats).
        if (failure && (finished || !cooperative)) throw failure;
        if (finished) break;
        await new Promise((r) => { wake = r; });
        wake = null;
      }
      await done;
      if (failure) throw failure;
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
  }

  // A stopped generation: a fresh worker with the same models and server (from the cache).
  _restart() {
    this._worker.terminate();
    const err = new DOMException('the generation was stopped', 'AbortError');
    for (const p of this._pending.values()) p.reject(err);
    this._pending.clear();
    this._start();
    const loaded = this._loaded, connected = this._connected;
    this._ready = (async () => {
      if (loaded) await this._call('load', loaded);
      if (connected) await this._call('connect', connected);
    })();
  }

  terminate() { this._worker.terminate(); }
}
