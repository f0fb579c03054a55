// Logits and greedy continuation of a GGUF model under llama.cpp (node-llama-cpp@3.22.1, CPU),
// for llamacpp_families.sh: the raw logits after every prompt token (float32, [tokens,
// n_vocab], to OUT.f32) and N greedy tokens, never stopping at end-of-generation (OUT.json).
//   node llamacpp_logits.mjs MODEL.gguf PROMPT_IDS(comma-separated) N OUT [FROM]
// With FROM, only the positions from FROM on are written (long prompts: [tokens - FROM, n_vocab]).
import {getLlama} from "node-llama-cpp";
import {writeFileSync} from "node:fs";
const [modelPath, idsArg, nArg, out, fromArg] = process.argv.slice(2);
const from = Number(fromArg || 0);
const prompt = idsArg.split(",").map(Number);
const n = Number(nArg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const size = Math.max(512, 64 * Math.ceil((prompt.length + n + 16) / 64));
const context = await model.createContext({contextSize: size, batchSize: size});
const seq = context.getSequence();
const rows = [];
const res = await seq.controlledEvaluate(prompt.map((t, i) => i >= from ? [t, {generateNext: {logits: true}}] : t));
let V = 0;
for (const r of res.slice(from)) {
  const logits = r.next.logits;  // Map<token, logit>
  if (!V) V = logits.size;
  const row = new Float32Array(V);
  for (const [tok, v] of logits) row[tok] = v;
  rows.push(row);
}
const argmax = row => { let b = 0; for (let i = 1; i < row.length; ++i) if (row[i] > row[b]) b = i; return b; };
const generated = [];
let last = rows[rows.length - 1];
for (let i = 0; i < n; ++i) {
  const t = argmax(last);
  generated.push(t);
  if (i + 1 == n) break;
  const [r] = await seq.controlledEvaluate([[t, {generateNext: {logits: true}}]]);
  last = new Float32Array(V);
  for (const [tok, v] of r.next.logits) last[tok] = v;
}
const all = new Float32Array(rows.length * V);
rows.forEach((r, i) => all.set(r, i * V));
writeFileSync(out + ".f32", Buffer.from(all.buffer));
writeFileSync(out + ".json", JSON.stringify({prompt_ids: prompt, generated, n_vocab: V, from}));
process.exit(0);
