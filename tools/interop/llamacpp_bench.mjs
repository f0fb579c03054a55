// Prompt-processing speed of a GGUF file under llama.cpp (the node-llama-cpp@3.22.1 prebuilt
// binding, CPU only): the time to evaluate PP prompt tokens in one batch, REPS times with the
// sequence cleared in between, median and range in tok/s as one JSON line. Used by
// llamacpp_bench.sh beside `tlr bench` on the same file (what `llama-bench -p PP` measures,
// through the binding; the token-by-token generation path carries the binding's overhead
// and is not timed).
// Usage: node llamacpp_bench.mjs MODEL.gguf [PP=128] [REPS=5] [THREADS=2]
import {getLlama} from "node-llama-cpp";
const [modelPath, pp, reps, threads] = [process.argv[2], Number(process.argv[3] || 128),
                                        Number(process.argv[4] || 5), Number(process.argv[5] || 2)];
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: pp + 16, batchSize: pp, threads});
const seq = context.getSequence();
const vocab = 1000;  // ids 10..1009: ordinary tokens in every vocabulary used here
const tokens = Array.from({length: pp}, (_, i) => (i * 7919 + 13) % vocab + 10);
await seq.evaluateWithoutGeneratingNewTokens(tokens.slice(0, 8));  // warm-up
await seq.clearHistory();
const speeds = [];
for (let r = 0; r < reps; ++r) {
  const t0 = process.hrtime.bigint();
  await seq.evaluateWithoutGeneratingNewTokens(tokens);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  speeds.push(pp / s);
  await seq.clearHistory();
}
speeds.sort((a, b) => a - b);
console.log(JSON.stringify({model: modelPath, pp, threads, pp_tok_s: speeds[Math.floor(speeds.length / 2)],
                            pp_min: speeds[0], pp_max: speeds[speeds.length - 1], build: llama.buildType}));
process.exit(0);
