// The official `openai` npm client against `tlr serve` (run by openai_client_test.sh, which
// installs the pinned client next to a copy of this file): model list, greedy completions
// (deterministic, cut by a stop string, the same text when streamed), chat with and without
// streaming, and the client's error classes for a wrong API key (401) and a bad request (400).
// Usage: node openai_client_test.mjs BASE_URL API_KEY     (BASE_URL without /v1)
import assert from "node:assert/strict";
import {test} from "node:test";
import OpenAI from "openai";

const [url, apiKey] = process.argv.slice(2);
assert.ok(url && apiKey, "usage: node openai_client_test.mjs BASE_URL API_KEY");
const options = {baseURL: url + "/v1", maxRetries: 0, timeout: 60_000};
const client = new OpenAI({...options, apiKey});
const prompt = "Question: What would you use a tharko for?\nA.";
const request = {prompt, temperature: 0, max_tokens: 20};
let model;     // id from /v1/models
let greedy;    // text of the greedy completion of `request`

test("models.list returns the served model", async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].object, "model");
  assert.equal(typeof models[0].id, "string");
  model = models[0].id;
});

test("completions.create: greedy text, usage, finish_reason, determinism", async () => {
  const r = await client.completions.create({model, ...request});
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  greedy = r.choices[0].text;
  assert.equal(typeof greedy, "string");
  assert.ok(greedy.length > 0, "empty completion");
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 20, `usage ${JSON.stringify(r.usage)}`);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  const again = await client.completions.create({model, ...request});
  assert.equal(again.choices[0].text, greedy, "temperature 0 is not deterministic");
});

test("completions.create: a stop string cuts the text", async () => {
  // Three characters from the middle of the greedy text; the answer ends before their first occurrence.
  const stop = greedy.slice(Math.floor(greedy.length / 2)).trimStart().slice(0, 3);
  assert.ok(stop.length > 0, `greedy text too short for a stop string: ${JSON.stringify(greedy)}`);
  const r = await client.completions.create({model, ...request, stop: [stop]});
  assert.equal(r.choices[0].text, greedy.slice(0, greedy.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

test("completions.create stream: chunks concatenate to the non-streamed text", async () => {
  const stream = await client.completions.create({model, ...request, stream: true});
  let text = "", chunks = 0, finish = null;
  for await (const c of stream) {
    assert.equal(c.choices.length, 1);
    text += c.choices[0].text;
    chunks += 1;
    finish = c.choices[0].finish_reason ?? finish;
  }
  assert.ok(chunks > 1, `only ${chunks} chunk(s)`);
  assert.equal(text, greedy);
  assert.ok(["length", "stop"].includes(finish), `finish_reason ${finish}`);
});

const chatRequest = {messages: [{role: "user", content: "What would you use a tharko for?"}], temperature: 0, max_tokens: 20};
let chatText;

test("chat.completions.create: an assistant message", async () => {
  const r = await client.chat.completions.create({model, ...chatRequest});
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  chatText = r.choices[0].message.content;
});

test("chat.completions.create stream: deltas, then the end", async () => {
  const stream = await client.chat.completions.create({model, ...chatRequest, stream: true});
  let text = "", role = null, deltas = 0, finish = null;
  for await (const c of stream) {
    assert.equal(c.object, "chat.completion.chunk");
    const d = c.choices[0].delta;
    role = d.role ?? role;
    text += d.content ?? "";
    deltas += 1;
    finish = c.choices[0].finish_reason ?? finish;
  }
  assert.equal(role, "assistant");
  assert.ok(deltas > 1, `only ${deltas} delta(s)`);
  assert.ok(["length", "stop"].includes(finish), `finish_reason ${finish}`);
  assert.equal(text, chatText, "streamed chat differs from the non-streamed one");
});

test("a wrong API key gives AuthenticationError (401)", async () => {
  const bad = new OpenAI({...options, apiKey: "wrong-key"});
  await assert.rejects(bad.completions.create({model, ...request}), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, 401);
    return true;
  });
});

test("a bad request (max_tokens -5) gives BadRequestError (400)", async () => {
  await assert.rejects(client.completions.create({model, ...request, max_tokens: -5}), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, 400);
    return true;
  });
});
