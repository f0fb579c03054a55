// The web UI in tab mode (apps layer, embedded; an ES module app.js imports when /api/info says
// "mode": "tab", i.e. the page comes from `tlr serve --web`): the SLM and its router run in this
// browser tab (the browser build, /tlr.js, in a worker) and the tokens the router doubts come from
// the server that served the page. Gives app.js the same events the device's /api/generate
// stream carries (token, stats), so the page renders both modes alike.

let tlr = null;
let connectedKey = null;

// Loads the models into the tab (from the browser's storage after the first visit). Resolves
// to the load's description ({build, threads, cached, bytes, notice}).
export async function openTab(info, onProgress) {
  const { Tlr } = await import('/tlr.js');
  tlr = new Tlr();
  return tlr.load({ slm: info.tab.slm, router: info.tab.router, onProgress });
}

// One generation with the page's request body ({prompt | messages, mode, threshold, max_tokens,
// temperature, chat, pipeline}); `on` = {token, stats} in the shapes of the device's stream.
export async function generateInTab(body, apiKey, signal, on) {
  if (!tlr) throw new Error('the models are not loaded in this tab yet');
  if (connectedKey !== apiKey) {  // the server that served the page, with the key the page was given
    connectedKey = null;  // (a failed connect leaves no LLM behind)
    await tlr.connect({ server: location.origin, apiKey: apiKey || undefined });
    connectedKey = apiKey;
  }
  const input = body.messages ? { messages: body.messages } : body.prompt;
  let i = 0, stopped = false;
  try {
    for await (const t of tlr.generate(input, {
      threshold: body.threshold, mode: body.mode, maxTokens: body.max_tokens, temperature: body.temperature,
      chat: body.chat, pipeline: body.pipeline, signal,
    })) {
      on.token({ ...t, i: i++ });
    }
  } catch (e) {
    if (e.name !== 'AbortError' || !tlr.stats) throw e;  // stopped cleanly: its stats follow
    stopped = true;
  }
  const s = tlr.stats;  // the device stream's names (tlr_stats'); the page's extras below
  on.stats({
    ...s,
    network_ms: Math.max(0, s.llm_ms - Math.max(0, s.llm_forward_ms)),
    pipeline: !!body.pipeline,
    stop: stopped || s.stop === 'cancelled' || s.stop === 'callback' ? 'stopped' : s.stop,
  });
}
