// Greedy answers of a GGUF model under llama.cpp (the node-llama-cpp@3.22.1 prebuilt binding,
// CPU only), one JSON line per question of a CommonsenseQA JSONL file: prompt ids and answer.
// Used by llamacpp_check.sh to compare with TLR's engine.
import {getLlama} from "node-llama-cpp";
import {readFileSync} from "node:fs";
const [modelPath, dataPath, limit, maxTokens] = [process.argv[2], process.argv[3], Number(process.argv[4] || 100), Number(process.argv[5] || 40)];
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 512});
const rows = readFileSync(dataPath, "utf8").split("\n").filter(Boolean).slice(0, limit).map(l => JSON.parse(l));
for (const r of rows) {
  const prompt = "Question: " + r.question + "\n" + r.choices.label.map((l, i) => l + ". " + r.choices.text[i] + "\n").join("");
  const seq = context.getSequence();
  const tokens = model.tokenize(prompt, false);
  const out = [];
  for await (const t of seq.evaluate(tokens, {temperature: 0})) {
    if (model.isEogToken(t) || out.length >= maxTokens) break;
    out.push(t);
  }
  seq.dispose();
  console.log(JSON.stringify({id: r.id, prompt_ids: Array.from(tokens), text: model.detokenize(out)}));
}
process.exit(0);
