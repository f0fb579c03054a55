// The official `openai` npm client against the device's routed OpenAI-compatible API (`tlr ui
// --no-page`, its LLM behind a `tlr serve`; run by device_openai_test.sh, which installs the
// pinned client next to a copy of this file):
// * a 6-turn streamed chat: per turn the chunks' tlr.tokens spell the streamed text, usage counts
//   them, no fallbacks, and from turn 2 on the prompt cache reused the previous turn (cached_tokens
//   >= its prompt + completion - 4: the template may rewrite the end token and the newline); the
//   tokens, id and source one for one, are those `tlr generate --messages` (same models, router,
//   sampling and LLM server, no prompt cache) writes to its --trace for the same messages;
// * models.list, the client's error classes for a wrong key (401), a bad routing mode (400; the
//   next request is served) and max_tokens past the context (400 context_length_exceeded), and a
//   non-streamed chat completion;
// * two clients streaming at once each get exactly what they get alone (greedy).
// Usage: node device_openai_test.mjs UI_URL API_KEY TLR_BINARY SERVE_URL WORK_DIR   (URLs without /v1)
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {test} from "node:test";
import OpenAI from "openai";

const [url, apiKey, tlr, serveUrl, work] = process.argv.slice(2);
assert.ok(url && apiKey && tlr && serveUrl && work,
          "usage: node device_openai_test.mjs UI_URL API_KEY TLR_BINARY SERVE_URL WORK_DIR");
const options = {baseURL: url + "/v1", maxRetries: 0, timeout: 120_000};
const client = new OpenAI({...options, apiKey});
const model = "tlr";
const maxTokens = 48;  // the demo models end most of these answers (the end token, "stop") within it
// Questions in the style of the demo models' data (models/demo/test.jsonl).
const turns = [
  "What would you use a tharko for?",
  "Where does a fexko live?",
  "What material is a vellunor made from?",
  "Where would you find a kelvel?",
  "What is a urdra used for?",
  "Where does a jorfex live?",
];
const user = (content) => ({role: "user", content});

// One streamed chat completion: its text, every chunk's tlr.tokens in order, finish_reason, usage.
async function streamChat(messages, extra = {}) {
  const stream = await client.chat.completions.create({
    model, messages, stream: true, stream_options: {include_usage: true}, temperature: 0, max_tokens: maxTokens, ...extra});
  let content = "", finish = null, usage = null, role = null;
  const tokens = [];
  for await (const c of stream) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.equal(usage, null, "a chunk after the usage chunk");
    if (c.usage) {
      assert.deepEqual(c.choices, [], "the usage chunk has choices");
      usage = c.usage;
      continue;
    }
    assert.equal(c.choices.length, 1);
    const ch = c.choices[0];
    role = ch.delta.role ?? role;
    content += ch.delta.content ?? "";
    for (const t of ch.tlr?.tokens ?? []) tokens.push(t);
    finish = ch.finish_reason ?? finish;
  }
  assert.equal(role, "assistant");
  assert.ok(usage, "no usage chunk (stream_options.include_usage)");
  return {content, tokens, finish, usage};
}

// The same messages through `tlr generate` (its defaults are tlr ui's: demo SLM, router and
// sampling; greedy, -n maxTokens): the tokens of its --trace.
function generateTrace(messages, name) {
  const file = join(work, `${name}.json`), trace = join(work, `${name}.trace.jsonl`);
  writeFileSync(file, JSON.stringify(messages));
  execFileSync(tlr, ["generate", "--server", serveUrl, "--messages", file, "-n", String(maxTokens), "--temp", "0",
                     "-t", "1", "--trace", trace, "-q"], {stdio: ["ignore", "ignore", "inherit"], timeout: 120_000});
  return readFileSync(trace, "utf8").trim().split("\n").map((l) => JSON.parse(l));
}

// Token for token: id, source and text (the first difference named in the message).
function assertSameTokens(got, want, what) {
  const brief = (t) => t && `${t.id} ${JSON.stringify(t.text)} ${t.source}`;
  for (let i = 0; i < Math.max(got.length, want.length); i++) {
    const a = got[i], b = want[i];
    assert.ok(a && b && a.id === b.id && a.source === b.source && a.text === b.text,
              `${what}: token ${i} differs: ${brief(a) ?? "(none)"} vs ${brief(b) ?? "(none)"}\n` +
              `  got:  ${got.map(brief).join(" | ")}\n  want: ${want.map(brief).join(" | ")}`);
  }
}

// Checks one streamed reply on its own: tokens spell the text, usage counts them.
function checkReply(r, what) {
  assert.equal(r.tokens.map((t) => t.text).join(""), r.content, `${what}: tlr.tokens do not spell the content`);
  for (const t of r.tokens) {
    assert.ok(Number.isInteger(t.id) && ["SLM", "LLM", "FALLBACK"].includes(t.source) && typeof t.confidence === "number",
              `${what}: token ${JSON.stringify(t)}`);
  }
  assert.equal(r.usage.completion_tokens, r.tokens.length, `${what}: usage.completion_tokens vs tlr.tokens`);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.usage.tlr.fallbacks, 0, `${what}: fallbacks (is the LLM server reachable?)`);
  assert.equal(r.usage.tlr.routed, r.tokens.filter((t) => t.source === "LLM").length, `${what}: routed`);
  assert.ok(r.usage.tlr.llm_calls >= (r.usage.tlr.routed > 0 ? 1 : 0), `${what}: llm_calls`);
  assert.ok(r.usage.tlr.stall_ms >= 0);
  // No stop strings: "stop" exactly when the last token is the end token (no text); else max_tokens.
  const ended = r.tokens.length > 0 && r.tokens.at(-1).text === "";
  assert.equal(r.finish, ended ? "stop" : "length", `${what}: finish_reason after ${r.tokens.length} tokens`);
  assert.ok(ended || r.tokens.length === maxTokens, `${what}: ${r.tokens.length} tokens, no end token`);
}

test("a 6-turn streamed chat: tokens, usage, the prompt cache, and the same tokens as tlr generate", async () => {
  const messages = [];
  let previous = null;
  for (let k = 1; k <= turns.length; k++) {
    messages.push(user(turns[k - 1]));
    const sent = structuredClone(messages);
    const r = await streamChat(sent);
    checkReply(r, `turn ${k}`);
    const u = r.usage;
    console.log(`turn ${k}: prompt_tokens ${u.prompt_tokens}, cached_tokens ${u.prompt_tokens_details.cached_tokens}, ` +
                `completion_tokens ${u.completion_tokens}, routed ${u.tlr.routed}, llm_calls ${u.tlr.llm_calls}, ` +
                `llm_prefilled ${u.tlr.llm_prefilled}, finish ${r.finish}; ${JSON.stringify(r.content)}`);
    if (previous) {
      const reused = previous.prompt_tokens + previous.completion_tokens - 4;
      assert.ok(u.prompt_tokens > previous.prompt_tokens + previous.completion_tokens, `turn ${k}: prompt_tokens`);
      assert.ok(u.prompt_tokens_details.cached_tokens >= reused,
                `turn ${k}: cached_tokens ${u.prompt_tokens_details.cached_tokens} < ${reused} (previous turn: ` +
                `${previous.prompt_tokens} prompt + ${previous.completion_tokens} completion - 4)`);
    }
    assertSameTokens(r.tokens, generateTrace(sent, `turn${k}`), `turn ${k} vs tlr generate --trace`);
    messages.push({role: "assistant", content: r.content});
    previous = u;
  }
});

test("models.list returns the one model, tlr", async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, model);
  assert.equal(models[0].object, "model");
});

const shortRequest = {model, messages: [user(turns[0])], temperature: 0, max_tokens: 4};

test("a wrong API key gives AuthenticationError (401)", async () => {
  const bad = new OpenAI({...options, apiKey: "wrong-key"});
  await assert.rejects(bad.chat.completions.create(shortRequest), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, 401);
    return true;
  });
});

test("routing {mode: bogus} gives BadRequestError (400); the next request is served", async () => {
  await assert.rejects(client.chat.completions.create({...shortRequest, routing: {mode: "bogus"}}), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, 400);
    assert.match(e.message, /routing/);
    return true;
  });
  const r = await client.chat.completions.create(shortRequest);
  assert.equal(r.usage.completion_tokens, r.choices[0].tlr.tokens.length);
  assert.ok(r.usage.completion_tokens > 0);
});

test("max_tokens past the context (4096) gives 400 context_length_exceeded", async () => {
  await assert.rejects(client.chat.completions.create({...shortRequest, max_tokens: 5000}), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, 400);
    assert.equal(e.code, "context_length_exceeded");
    assert.match(e.message, /maximum context length is 4096 tokens/);
    return true;
  });
});

const alone = [];  // streamed results of `pair`, one at a time

test("a non-streamed chat completion: message content and usage, the streamed text", async () => {
  const r = await client.chat.completions.create({...shortRequest, max_tokens: maxTokens});
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0, JSON.stringify(r.usage));
  assert.equal(r.usage.completion_tokens, r.choices[0].tlr.tokens.length);
  assert.equal(r.usage.tlr.fallbacks, 0);
  const s = await streamChat(shortRequest.messages);
  assert.equal(r.choices[0].message.content, s.content, "non-streamed and streamed text differ");
  assertSameTokens(r.choices[0].tlr.tokens, s.tokens, "non-streamed vs streamed");
});

const pair = [turns[3], turns[5]].map((q) => [user(q)]);

test("two clients streaming at once each get what they get alone", async () => {
  for (const m of pair) alone.push(await streamChat(m));
  const other = new OpenAI({...options, apiKey});  // a second client (its own connections)
  const both = await Promise.all(pair.map((m, i) => {
    const c = i === 0 ? client : other;
    return c.chat.completions.create({model, messages: m, stream: true, stream_options: {include_usage: true},
                                      temperature: 0, max_tokens: maxTokens}).then(async (stream) => {
      let content = "";
      const tokens = [];
      for await (const ch of stream) {
        if (!ch.choices.length) continue;
        content += ch.choices[0].delta.content ?? "";
        for (const t of ch.choices[0].tlr?.tokens ?? []) tokens.push(t);
      }
      return {content, tokens};
    });
  }));
  for (let i = 0; i < pair.length; i++) {
    assert.equal(both[i].content, alone[i].content, `client ${i + 1}: text differs from its run alone`);
    assertSameTokens(both[i].tokens, alone[i].tokens, `client ${i + 1} at once vs alone`);
  }
});
