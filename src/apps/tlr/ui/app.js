// The web UI's logic (apps layer, embedded in the binary; plain JavaScript, no libraries).
// Talks only to its own server: GET /api/info and /api/results, POST /api/generate (a stream
// of Server-Sent Events read with fetch) and /api/stop. Served by `tlr serve --web` instead,
// /api/info says "mode": "tab": the SLM then runs in this tab (tab.js) and routes to that server. Renders the tokens as they come (LLM
// red, FALLBACK yellow), a confidence strip with the threshold line, live statistics, and an
// accuracy-vs-threshold chart from eval results. With "conversation" on, the output is a chat:
// each turn sends every message so far (the device's prompt cache prefills only the new ones),
// and every assistant message carries its own statistics. Every failure ends up in the error
// box.
'use strict';

const $ = (id) => document.getElementById(id);
const SVG_NS = 'http://www.w3.org/2000/svg';

const ui = {
  info: null,
  results: null,
  tokens: [],          // token events of the current generation
  controller: null,    // AbortController of the running stream
  stopTimer: 0,
  gotFinal: false,
  final: null,         // the current generation's final statistics
  body: null,          // the element the current generation's tokens go into
  history: [],         // the conversation's messages ({role, content}), sent with each turn
  chatActive: false,   // the output shows the conversation (not a single completion)
  userMsg: null,       // the current turn's message elements
  current: null,
  conv: { turns: 0, tokens: 0, routed: 0, prefilled: 0, reused: 0 },
  tab: null,           // tab mode: tab.js, once the models are loaded in this tab
};

const STRIP_H = 80;
const STRIP_TOP = 14;  // room for the threshold's label above the tallest bar
const BAR_W = 6;
const BAR_STEP = 8;

// ---- small helpers ----

function fmtMs(v) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
  if (v >= 100) return Math.round(v) + ' ms';
  if (v >= 10) return v.toFixed(1) + ' ms';
  return v.toFixed(2) + ' ms';
}

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function showError(message) {
  $('error-text').textContent = message;
  $('error').hidden = false;
}

function clearError() {
  $('error').hidden = true;
  $('error-text').textContent = '';
}

function setStatus(state, text) {
  const s = $('status');
  s.dataset.state = state;
  s.textContent = text;
}

function setRunning(running) {
  $('start').disabled = running;
  $('stop').disabled = !running;
  $('new-conv').disabled = running;
  $('chat').disabled = running;
}

function threshold() {
  return Number($('threshold').value);
}

// An error body of the API ({"error": {"message"}}) or a plain text one.
async function errorMessage(res) {
  const text = await res.text().catch(() => '');
  try {
    const j = JSON.parse(text);
    if (j && j.error && j.error.message) return j.error.message;
  } catch (e) { /* not JSON */ }
  return 'HTTP ' + res.status + (text ? ': ' + text.slice(0, 300) : '');
}

function networkError(e) {
  return 'cannot reach the tlr ui server (' + (e && e.message ? e.message : e) + '); is it still running?';
}

// ---- threshold: slider, strip line, chart marker ----

function stripY(conf) {
  return STRIP_H - conf * (STRIP_H - STRIP_TOP);
}

function onThreshold() {
  const t = threshold();
  $('threshold-value').textContent = t.toFixed(2);
  const y = stripY(t).toFixed(1);
  const line = $('threshold-line');
  line.setAttribute('y1', y);
  line.setAttribute('y2', y);
  const label = $('threshold-label');
  label.setAttribute('y', String(Math.max(11, Number(y) - 4)));
  label.textContent = 'threshold ' + t.toFixed(2);
  for (const bar of $('strip-bars').children) {
    const c = Number(bar.dataset.conf);
    bar.classList.toggle('below', c >= 0 && c < t);
  }
  drawMarker();
}

// ---- the token stream ----

const STAT_IDS = ['st-tokens', 'st-prompt', 'st-routed', 'st-llmwork', 'st-fallbacks', 'st-ttft', 'st-tbt', 'st-slm',
                  'st-router', 'st-llm', 'st-network', 'st-stall', 'st-spec', 'st-total', 'st-stop'];

// A fresh provisional tail at the end of `parent` (the previous message's is dropped).
function newProvisional(parent) {
  const old = $('provisional');
  if (old) old.remove();
  const prov = document.createElement('span');
  prov.id = 'provisional';
  prov.className = 'provisional';
  prov.dataset.count = '0';
  prov.title = 'provisional: the SLM\'s guess while routed tokens are on the network';
  parent.appendChild(prov);
}

function resetTurn() {
  ui.tokens = [];
  ui.final = null;
  $('strip-bars').textContent = '';
  sizeStrip();
  for (const id of STAT_IDS) $(id).textContent = '–';
}

// A single completion: the prompt, then the tokens that continue it.
function beginRaw(promptText) {
  ui.chatActive = false;
  const text = $('text');
  text.textContent = '';
  const p = document.createElement('span');
  p.className = 'prompt';
  p.textContent = promptText;
  text.appendChild(p);
  ui.body = text;
  ui.current = null;
  newProvisional(text);
  resetTurn();
}

function addMessage(role, content) {
  const m = document.createElement('div');
  m.className = 'msg msg-' + role;
  const r = document.createElement('span');
  r.className = 'msg-role';
  r.textContent = role === 'user' ? 'you' : 'assistant';
  m.appendChild(r);
  const body = document.createElement('span');
  body.className = 'msg-body';
  body.textContent = content;
  m.appendChild(body);
  $('text').appendChild(m);
  return m;
}

// A conversation's next turn: the user's message, then the assistant's as it is generated.
function beginTurn(userText) {
  if (!ui.chatActive) {
    $('text').textContent = '';
    ui.chatActive = true;
  }
  ui.userMsg = addMessage('user', userText);
  ui.current = addMessage('assistant', '');
  const stats = document.createElement('span');
  stats.className = 'msg-stats';
  ui.current.appendChild(stats);
  ui.body = ui.current.querySelector('.msg-body');
  newProvisional(ui.body);
  resetTurn();
  $('text').scrollTop = $('text').scrollHeight;
}

function convStats() {
  const c = ui.conv;
  $('st-conv').textContent = c.turns === 0 ? '–' :
    c.turns + (c.turns === 1 ? ' turn: ' : ' turns: ') + c.tokens + ' tokens, ' + c.routed + ' from the LLM; prompt ' +
    c.prefilled + ' prefilled, ' + c.reused + ' reused';
}

// The turn is over: its answer joins the conversation, or (failed) the user's message leaves it.
function finishTurn() {
  const s = ui.final;
  const provisional = $('provisional');
  if (provisional) provisional.remove();
  if (!s) {
    ui.history.pop();
    ui.userMsg.classList.add('msg-failed');
    ui.userMsg.title = 'not answered: the request failed (the message is back in the box)';
    ui.current.remove();
    ui.current = null;
    if (!$('prompt').value) $('prompt').value = ui.userMsg.querySelector('.msg-body').textContent;
    return;
  }
  const content = ui.tokens.filter((t) => !t.end).map((t) => t.text).join('');
  ui.history.push({ role: 'assistant', content });
  const reused = s.prompt_reused || 0;
  const c = ui.conv;
  c.turns += 1;
  c.tokens += s.generated;
  c.routed += s.routed;
  c.prefilled += s.prompt_tokens - reused;
  c.reused += reused;
  ui.current.dataset.done = '1';
  ui.current.querySelector('.msg-stats').textContent =
    s.generated + ' tokens · ' + s.routed + ' from the LLM' + (s.fallbacks ? ' · ' + s.fallbacks + ' fallbacks' : '') +
    ' · prompt ' + s.prompt_tokens + ' (' + (s.prompt_tokens - reused) + ' prefilled, ' + reused + ' reused) · TTFT ' +
    fmtMs(s.ttft_ms) + (s.stop === 'stopped' ? ' · stopped' : '');
  convStats();
}

function newConversation() {
  if (ui.controller) return;
  ui.history = [];
  ui.chatActive = false;
  ui.conv = { turns: 0, tokens: 0, routed: 0, prefilled: 0, reused: 0 };
  $('text').textContent = '';
  ui.body = $('text');
  newProvisional(ui.body);
  resetTurn();
  convStats();
  setStatus('ready', $('chat').checked ? 'new conversation' : 'ready');
}

function chatModeChanged() {
  $('prompt-label').textContent = $('chat').checked ? 'Message' : 'Prompt';
  $('start').textContent = $('chat').checked ? 'Send' : 'Start';
  newConversation();
}

function sizeStrip() {
  const wrap = document.querySelector('.strip-wrap');
  const need = ui.tokens.length * BAR_STEP + 8;
  const width = Math.max(wrap.clientWidth - 2, need, 200);
  $('strip').setAttribute('width', String(width));
}

function addToken(ev) {
  ui.tokens.push(ev);
  const source = String(ev.source || 'SLM');
  const conf = typeof ev.confidence === 'number' ? ev.confidence : -1;
  const confText = conf >= 0 ? 'confidence ' + conf.toFixed(3) : 'confidence n/a (router not run)';
  const SPEC = { hit: 'the speculation on it stood', branch: 'a speculated branch stood', miss: 'speculation discarded',
                 draft: 'from the LLM\'s lookahead draft, no call', blocking: 'the device waited for it' };
  const spec = SPEC[ev.spec] ? ' · ' + SPEC[ev.spec] : '';
  const title = source + ' · ' + confText + spec + (ev.end ? ' · end of generation' : '') +
                (ev.llm_error ? ' · the LLM call failed: ' + String(ev.llm_error) : '');

  const span = document.createElement('span');
  span.className = 'tok tok-' + source.toLowerCase() + (ev.end ? ' tok-end' : '');
  span.dataset.i = String(ev.i);
  span.title = title;
  span.textContent = ev.end ? ' ⟨end⟩' : ev.text;
  const text = $('text');
  const atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
  ui.body.insertBefore(span, $('provisional'));  // confirmed tokens go before the provisional tail
  if (atBottom) text.scrollTop = text.scrollHeight;

  const i = ui.tokens.length - 1;
  const h = conf >= 0 ? Math.max(1, conf * (STRIP_H - STRIP_TOP)) : 3;
  const bar = svg('rect', {
    x: 4 + i * BAR_STEP, y: STRIP_H - h, width: BAR_W, height: h,
    class: 'bar' + (conf < 0 ? ' na' : '') + (conf >= 0 && conf < threshold() ? ' below' : '') +
           (source === 'LLM' ? ' llm' : ''),
    'data-conf': conf, 'data-i': ev.i,
  }, $('strip-bars'));
  svg('title', {}, bar).textContent = title;
  sizeStrip();
  liveStats();
}

// The speculative tail while routed tokens are on the network: drawn after the confirmed text
// until the LLM's answers confirm (or replace) it.
function setProvisional(ev) {
  const p = $('provisional');
  if (!p) return;
  const ids = Array.isArray(ev.ids) ? ev.ids : [];
  const pending = Array.isArray(ev.pending) ? ev.pending.filter(Boolean).length : 0;
  p.textContent = ids.length ? String(ev.text || '') : '';
  p.dataset.count = String(ids.length);
  p.dataset.pending = String(pending);
}

function liveStats() {
  const t = ui.tokens;
  const n = t.length;
  const routed = t.filter((e) => e.source === 'LLM').length;
  const fallbacks = t.filter((e) => e.source === 'FALLBACK').length;
  const sum = (k) => t.reduce((a, e) => a + (e[k] || 0), 0);
  $('st-tokens').textContent = String(n);
  $('st-routed').textContent = routed + ' (' + (n ? (100 * routed / n).toFixed(1) : '0.0') + '%)';
  $('st-fallbacks').textContent = String(fallbacks);
  $('st-ttft').textContent = n ? fmtMs(t[0].at_ms) : '–';
  $('st-tbt').textContent = n > 1 ? fmtMs((t[n - 1].at_ms - t[0].at_ms) / (n - 1)) : '–';
  $('st-slm').textContent = fmtMs(sum('slm_ms'));
  $('st-router').textContent = fmtMs(sum('router_ms'));
  $('st-llm').textContent = fmtMs(sum('llm_ms'));
  $('st-network').textContent = '…';
  $('st-total').textContent = n ? fmtMs(t[n - 1].at_ms) : '–';
}

const STOP_TEXT = {
  eos: 'end of the answer',
  max_tokens: 'max tokens reached',
  stopped: 'stopped',
};

function finalStats(s) {
  ui.gotFinal = true;
  ui.final = s;
  $('st-tokens').textContent = String(s.generated);
  $('st-prompt').textContent = s.prompt_tokens == null ? '–' :
    s.prompt_tokens + ' (' + (s.prompt_tokens - (s.prompt_reused || 0)) + ' prefilled, ' + (s.prompt_reused || 0) +
    ' reused from the cache)';
  $('st-routed').textContent = s.routed + ' (' + Number(s.routed_pct).toFixed(1) + '%)';
  $('st-llmwork').textContent = s.llm_generated + ' generated (' +
    (s.routed ? Number(s.llm_generated_per_routed).toFixed(2) + ' per routed' : 'none routed') + '), ' +
    s.llm_prefilled + ' prefilled';
  $('st-fallbacks').textContent = String(s.fallbacks) + (s.llm_failure ? ' (' + s.llm_failure + ')' : '');
  $('st-ttft').textContent = s.generated ? fmtMs(s.ttft_ms) : '–';
  $('st-tbt').textContent = s.generated > 1 ? fmtMs(s.tbt_ms) : '–';
  $('st-slm').textContent = fmtMs(s.slm_ms);
  $('st-router').textContent = fmtMs(s.router_ms);
  $('st-llm').textContent = fmtMs(s.llm_ms);
  $('st-network').textContent = fmtMs(s.network_ms);
  $('st-stall').textContent = fmtMs(s.stall_ms);
  $('st-spec').textContent = !s.pipeline ? 'pipeline off' :
    s.spec_resolved ? Number(s.spec_hit_pct).toFixed(0) + '% of ' + s.spec_resolved + ' answered' +
                      (s.lookahead_used ? ', ' + s.lookahead_used + ' from lookahead' : '') :
    s.lookahead_used ? s.lookahead_used + ' from lookahead' : '–';
  $('st-total').textContent = fmtMs(s.total_ms);
  setProvisional({ ids: [] });
  $('st-stop').textContent = STOP_TEXT[s.stop] || String(s.stop);
  if (s.stop === 'stopped') {
    setStatus('stopped', (s.superseded ? 'cancelled by a newer generation after ' : 'stopped after ') + s.generated +
              ' tokens');
  } else {
    setStatus('done', 'done: ' + (STOP_TEXT[s.stop] || s.stop) + ' (' + s.generated + ' tokens, ' + s.routed +
              ' from the LLM)');
  }
}

function handleEvent(name, data) {
  let j;
  try {
    j = JSON.parse(data);
  } catch (e) {
    throw new Error('the server sent a malformed ' + name + ' event');
  }
  if (name === 'token') addToken(j);
  else if (name === 'provisional') setProvisional(j);
  else if (name === 'stats') finalStats(j);
  else if (name === 'error') {
    ui.gotFinal = true;
    showError('generation failed: ' + j.message);
    setStatus('error', 'error');
  } else if (name === 'start') {
    setStatus('running', 'generating… (' + j.mode + (j.mode === 'joint' ? ', ' + j.router + ' < ' +
              Number(j.threshold).toFixed(2) : '') + ', prompt ' + j.prompt_tokens + ' tokens)');
  }
}

// Reads a text/event-stream body and dispatches its events.
async function readEvents(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, k);
      buf = buf.slice(k + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;  // heartbeat
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) handleEvent(name, data.join('\n'));
    }
  }
}

function readNumber(id, what, integer) {
  const el = $(id);
  const v = el.value.trim();
  if (v === '' || el.validity.badInput) throw new Error(what + ': enter a number');
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(what + ': enter a number');
  if (integer && !Number.isInteger(n)) throw new Error(what + ': enter a whole number');
  return n;
}

async function start() {
  clearError();
  if (ui.info && ui.info.mode === 'tab' && !ui.tab) {
    showError('the models are not loaded in this tab (see the message above, or reload the page)');
    return;
  }
  const prompt = $('prompt').value;
  const chatTurn = $('chat').checked;
  let body;
  try {
    body = {
      prompt,
      mode: $('mode').value,
      router: $('router').value,
      threshold: threshold(),
      max_tokens: readNumber('max-tokens', 'max tokens', true),
      temperature: readNumber('temperature', 'temperature', false),
      chat: $('chat').checked,
      pipeline: $('pipeline').checked,
    };
  } catch (e) {
    showError(e.message);
    setStatus('error', 'error');
    return;
  }
  if (!prompt.trim()) {
    showError(chatTurn ? 'write a message first, or pick an example question' :
                         'write a prompt first, or pick an example question');
    setStatus('error', 'error');
    return;
  }
  if (ui.controller) ui.controller.abort();
  const controller = new AbortController();
  ui.controller = controller;
  ui.gotFinal = false;
  if (chatTurn) {
    ui.history.push({ role: 'user', content: prompt });
    body.messages = ui.history.slice();
    delete body.prompt;
    delete body.chat;
    beginTurn(prompt);
    $('prompt').value = '';
  } else {
    beginRaw(prompt);
  }
  setRunning(true);
  setStatus('running', 'starting…');
  try {
    if (ui.tab) {
      setStatus('running', 'generating in this tab… (' + body.mode + (body.mode === 'joint' ? ', ' + body.router +
                ' < ' + body.threshold.toFixed(2) : '') + ')');
      const mine = (f) => (x) => { if (ui.controller === controller) f(x); };  // not a superseded one's
      await ui.tab.generateInTab(body, $('api-key').value.trim(), controller.signal,
                                 { token: mine(addToken), stats: mine(finalStats) });
      return;
    }
    const res = await fetch('/api/generate', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) {
      showError(await errorMessage(res));
      setStatus('error', 'error');
      return;
    }
    await readEvents(res);
    if (!ui.gotFinal) {
      showError('the stream ended before the generation finished (did the server stop?)');
      setStatus('error', 'error');
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      if (!ui.gotFinal && ui.controller === controller) setStatus('stopped', 'stopped after ' + ui.tokens.length + ' tokens');
    } else if (e instanceof TypeError) {
      showError(networkError(e));
      setStatus('error', 'error');
    } else {
      showError(e.message || String(e));
      setStatus('error', 'error');
    }
  } finally {
    if (chatTurn && ui.current && !ui.current.dataset.done) finishTurn();
    if (ui.controller === controller) {
      ui.controller = null;
      clearTimeout(ui.stopTimer);
      setRunning(false);
    }
  }
}

async function stop() {
  if (!ui.controller) return;
  const controller = ui.controller;
  setStatus('running', 'stopping…');
  $('stop').disabled = true;
  if (ui.tab) {  // the tab's worker is replaced (the models reload from the browser's storage)
    controller.abort();
    return;
  }
  try {
    const res = await fetch('/api/stop', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}',
    });
    if (!res.ok) showError('stop: ' + await errorMessage(res));
  } catch (e) {
    showError(networkError(e));
  }
  // The stream ends with the stopped statistics; if it does not, give up on it.
  clearTimeout(ui.stopTimer);
  ui.stopTimer = setTimeout(() => { if (ui.controller === controller) controller.abort(); }, 5000);
}

// ---- eval results chart ----

const CH = { w: 300, h: 190, l: 38, r: 10, t: 10, b: 28 };

function chartX(t) { return CH.l + t * (CH.w - CH.l - CH.r); }

function chartScale() {
  const rows = ui.results.rows;
  const accs = rows.map((r) => Number(r.accuracy)).filter(Number.isFinite);
  const lo = Math.max(0, Math.floor(Math.min(...accs) * 10) / 10);
  const hi = Math.min(1, Math.ceil(Math.max(...accs) * 10) / 10);
  return { lo, hi: hi > lo ? hi : lo + 0.1 };
}

function chartY(a, sc) {
  return CH.h - CH.b - (a - sc.lo) / (sc.hi - sc.lo) * (CH.h - CH.t - CH.b);
}

function jointRows() {
  return ui.results.rows
    .filter((r) => r.mode === 'joint' && typeof r.threshold === 'number')
    .sort((a, b) => a.threshold - b.threshold);
}

function drawChart() {
  const box = $('chart');
  box.textContent = '';
  const sc = chartScale();
  const pts = jointRows();
  for (let a = sc.lo; a <= sc.hi + 1e-9; a += (sc.hi - sc.lo > 0.5 ? 0.2 : 0.1)) {
    const y = chartY(a, sc);
    svg('line', { class: 'grid', x1: CH.l, x2: CH.w - CH.r, y1: y, y2: y }, box);
    svg('text', { class: 'tick', x: CH.l - 4, y: y + 3, 'text-anchor': 'end' }, box).textContent =
        Math.round(a * 100) + '%';
  }
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    svg('text', { class: 'tick', x: chartX(t), y: CH.h - CH.b + 14, 'text-anchor': 'middle' }, box).textContent = String(t);
  }
  svg('text', { class: 'tick', x: (CH.l + CH.w - CH.r) / 2, y: CH.h - 2, 'text-anchor': 'middle' }, box).textContent =
      'threshold';
  svg('line', { class: 'axis', x1: CH.l, x2: CH.w - CH.r, y1: CH.h - CH.b, y2: CH.h - CH.b }, box);
  svg('line', { class: 'axis', x1: CH.l, x2: CH.l, y1: CH.t, y2: CH.h - CH.b }, box);
  for (const [mode, cls, name] of [['small_only', 'base-slm', 'SLM alone'], ['large_only', 'base-llm', 'LLM alone']]) {
    const r = ui.results.rows.find((x) => x.mode === mode);
    if (!r) continue;
    const y = chartY(Number(r.accuracy), sc);
    svg('line', { class: cls, x1: CH.l, x2: CH.w - CH.r, y1: y, y2: y }, box);
    svg('text', { class: 'base-label', x: CH.w - CH.r - 2, y: y - 3, 'text-anchor': 'end' }, box).textContent =
        name + ' ' + (100 * r.accuracy).toFixed(1) + '%';
  }
  if (pts.length) {
    svg('polyline', {
      class: 'curve', points: pts.map((r) => chartX(r.threshold).toFixed(1) + ',' + chartY(r.accuracy, sc).toFixed(1)).join(' '),
    }, box);
    for (const r of pts) {
      const c = svg('circle', { class: 'pt', cx: chartX(r.threshold), cy: chartY(r.accuracy, sc), r: 2.5 }, box);
      svg('title', {}, c).textContent = 'threshold ' + r.threshold.toFixed(2) + ': accuracy ' +
          (100 * r.accuracy).toFixed(1) + '%, routed ' + Number(r.routed_pct).toFixed(1) + '%' + llmWorkText(r);
    }
  }
  svg('line', { id: 'chart-marker', class: 'marker', x1: 0, x2: 0, y1: CH.t, y2: CH.h - CH.b }, box);
  svg('circle', { id: 'chart-marker-dot', class: 'marker-dot', cx: 0, cy: 0, r: 4 }, box);
  drawMarker();
}

// The LLM's work of an evaluated row, when the results have it (older files do not).
function llmWorkText(r) {
  let out = '';
  if (r.llm_generated_per_routed != null && r.routed_tokens) {
    out += '; the LLM generated ' + Number(r.llm_generated_per_routed).toFixed(2) + ' tokens per routed token';
  }
  if (r.llm_cost_vs_llm_alone != null) {
    out += ', cost ' + (100 * Number(r.llm_cost_vs_llm_alone)).toFixed(1) + '% of the LLM alone';
  }
  return out;
}

// Linear interpolation of a joint-row field at threshold t.
function interpolate(pts, t, key) {
  if (!pts.length) return NaN;
  if (t <= pts[0].threshold) return Number(pts[0][key]);
  for (let i = 1; i < pts.length; ++i) {
    if (t <= pts[i].threshold) {
      const a = pts[i - 1], b = pts[i];
      const f = (t - a.threshold) / (b.threshold - a.threshold || 1);
      return Number(a[key]) + f * (Number(b[key]) - Number(a[key]));
    }
  }
  return Number(pts[pts.length - 1][key]);
}

function drawMarker() {
  const marker = $('chart-marker');
  if (!marker || !ui.results) return;
  const t = threshold();
  const x = chartX(t).toFixed(1);
  marker.setAttribute('x1', x);
  marker.setAttribute('x2', x);
  const pts = jointRows();
  const acc = interpolate(pts, t, 'accuracy');
  const routed = interpolate(pts, t, 'routed_pct');
  const withCost = pts.filter((r) => r.llm_cost_vs_llm_alone != null);
  const cost = withCost.length === pts.length ? interpolate(pts, t, 'llm_cost_vs_llm_alone') : NaN;
  const dot = $('chart-marker-dot');
  if (Number.isFinite(acc)) {
    dot.setAttribute('cx', x);
    dot.setAttribute('cy', chartY(acc, chartScale()).toFixed(1));
    $('chart-note').textContent = 'At threshold ' + t.toFixed(2) + ': accuracy ≈ ' + (100 * acc).toFixed(1) +
        '%, routed ≈ ' + routed.toFixed(1) + '% of tokens' +
        (Number.isFinite(cost) ? ', LLM cost ≈ ' + (100 * cost).toFixed(1) + '% of the LLM alone' : '') +
        ' (' + (ui.results.questions || '?') +
        ' questions; interpolated between evaluated thresholds).';
  }
}

// ---- start-up ----

function describeModels(info) {
  const m = info.models || {};
  const slm = m.slm ? m.slm.name : '?';
  const llm = m.llm ? (m.llm.where === 'server' ? m.llm.name + (info.mode === 'tab' ? ' (this server)' : '') :
                       m.llm.name + ' (in process)') : '?';
  const rtt = m.llm && m.llm.sim_rtt_ms > 0 ? ', simulated round trip ' + m.llm.sim_rtt_ms + ' ms' : '';
  const pace = info.pipeline && info.pipeline.sim_slm_ms > 0 ?
    ' · SLM pace SIMULATED: ≥ ' + info.pipeline.sim_slm_ms + ' ms per pass' : '';
  return 'SLM ' + slm + ' · LLM ' + llm + rtt + pace;
}

// Tab mode: the SLM and router load into this tab (downloaded once, then from the browser's
// storage); the page asks for the server's API key when it wants one.
async function openTab(info) {
  $('key-box').hidden = !info.tab.needs_key;
  $('start').disabled = true;  // until the models are in this tab (Start never falls back to the device API)
  const tab = await import('/tab.js');
  const MiB = (n) => (n / 1048576).toFixed(1) + ' MiB';
  const loaded = await tab.openTab(info, (p) => setStatus('loading', 'downloading the ' + p.what + ' into this tab: ' +
      (p.total ? Math.round(100 * p.done / p.total) + '% of ' + MiB(p.total) : MiB(p.done))));
  ui.tab = tab;
  $('start').disabled = false;
  const from = loaded.cached.SLM ? 'from the browser\'s storage' : 'downloaded';
  $('models').textContent = describeModels(info) + ' · SLM in this tab (' + loaded.build + ', ' + from + ')';
  if (loaded.notice) {
    $('warning').textContent = 'Note: ' + loaded.notice;
    $('warning').hidden = false;
  }
}

function routerHint() {
  const r = (ui.info.routers || []).find((x) => x.name === $('router').value);
  $('threshold-hint').textContent = r ? 'Recommended for ' + r.name + ': ' + Number(r.threshold).toFixed(3) + '.' : '';
  return r;
}

async function loadInfo() {
  let res;
  try {
    res = await fetch('/api/info');
  } catch (e) {
    throw new Error(networkError(e));
  }
  if (!res.ok) throw new Error('loading /api/info: ' + await errorMessage(res));
  const info = await res.json();
  ui.info = info;
  $('models').textContent = describeModels(info);
  if (info.warning) {
    $('warning').textContent = 'Warning: ' + info.warning;
    $('warning').hidden = false;
  }
  const routerSel = $('router');
  routerSel.textContent = '';
  for (const r of info.routers || []) {
    const o = document.createElement('option');
    o.value = r.name;
    o.textContent = r.label;
    routerSel.appendChild(o);
  }
  routerSel.value = info.router;
  const ex = $('example');
  (info.examples || []).forEach((e, i) => {
    const o = document.createElement('option');
    o.value = String(i);
    o.textContent = e.label + (e.answer ? '  [' + e.answer + ']' : '');
    ex.appendChild(o);
  });
  if (info.examples && info.examples.length && !$('prompt').value) {
    ex.value = '0';
    $('prompt').value = info.examples[0].prompt;
  }
  $('threshold').value = String(info.threshold);
  $('max-tokens').value = String(info.max_tokens.default);
  $('max-tokens').max = String(info.max_tokens.max);
  $('temperature').value = String(info.temperature);
  if (info.pipeline) $('pipeline').checked = !!info.pipeline.enabled;
  routerHint();
  onThreshold();
  if (info.results) {
    try {
      const r = await fetch('/api/results');
      if (!r.ok) throw new Error(await errorMessage(r));
      ui.results = await r.json();
      if (Array.isArray(ui.results.rows) && ui.results.rows.length) {
        $('chart-box').hidden = false;
        drawChart();
      }
    } catch (e) {
      showError('loading the eval results: ' + e.message);
    }
  }
  if (info.mode === 'tab') await openTab(info);
}

function init() {
  window.addEventListener('error', (e) => showError('page error: ' + e.message));
  window.addEventListener('unhandledrejection', (e) => showError('page error: ' + (e.reason && e.reason.message || e.reason)));
  $('threshold').addEventListener('input', onThreshold);
  $('start').addEventListener('click', start);
  $('stop').addEventListener('click', stop);
  $('new-conv').addEventListener('click', newConversation);
  $('chat').addEventListener('change', chatModeChanged);
  $('error-close').addEventListener('click', clearError);
  $('router').addEventListener('change', () => {
    const r = routerHint();
    if (r) {
      $('threshold').value = String(r.threshold);
      onThreshold();
    }
  });
  $('example').addEventListener('change', () => {
    const e = ui.info && ui.info.examples[Number($('example').value)];
    if (e) $('prompt').value = e.prompt;
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && !$('start').disabled) start();
  });
  window.addEventListener('resize', sizeStrip);
  // Leaving the page stops a generation on the device (the server also notices the closed stream).
  window.addEventListener('pagehide', () => {
    if (ui.controller && !ui.tab) {
      fetch('/api/stop', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}', keepalive: true })
        .catch(() => {});
    }
  });
  ui.body = $('text');
  newProvisional(ui.body);
  onThreshold();
  sizeStrip();
  setRunning(false);
  loadInfo().then(() => setStatus('ready', 'ready'), (e) => {
    showError(e.message);
    setStatus('error', 'not connected');
  });
}

init();
