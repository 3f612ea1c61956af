// End-to-end client for Switchyard, built on the official openai package.
// Usage: node client.mjs <scenario> <baseURL> [json-options]
// Prints one JSON object on stdout; the Go e2e tests assert on it.
import OpenAI from "openai";
import { messages, responses } from "./apis.mjs";

const [scenario, baseURL, rawOpts] = process.argv.slice(2);
const opts = (rawOpts && JSON.parse(rawOpts)) || {};
const client = new OpenAI({
  baseURL: baseURL + "/v1",
  apiKey: opts.apiKey ?? "unused",
  maxRetries: 0,
  timeout: 60_000,
});

// words gives a deterministic text of n words; seed varies the text.
function words(n, seed) {
  const vocab = ["river", "signal", "copper", "lantern", "orbit", "meadow", "cipher", "harbor",
    "granite", "velvet", "thunder", "pixel", "saffron", "glacier", "tandem", "quartz"];
  let x = (seed * 2654435761) >>> 0 || 1;
  const out = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    out.push(vocab[x % vocab.length]);
  }
  return out.join(" ");
}

function errInfo(e) {
  return { status: e?.status ?? null, type: e?.error?.type ?? e?.type ?? null, message: String(e?.message ?? e) };
}

async function chatStream(messages, extra = {}) {
  const stream = await client.chat.completions.create({
    model: opts.model, messages, stream: true, stream_options: { include_usage: true }, max_tokens: 16, ...extra,
  });
  let text = "", usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices?.length) text += chunk.choices[0].delta?.content ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage, chunks };
}

async function basic() {
  const out = {};
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);
  const model = opts.model ?? out.models[0];
  opts.model = model;
  const prompt = "Tell me about switchyards. " + words(400, 7);

  const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }], max_tokens: 12 });
  out.chat = { text: chat.choices[0].message.content, finish: chat.choices[0].finish_reason, usage: chat.usage };

  out.chatStream = await chatStream([{ role: "user", content: prompt }], { max_tokens: 12 });

  const comp = await client.completions.create({ model, prompt, max_tokens: 8 });
  out.completion = { text: comp.choices[0].text, finish: comp.choices[0].finish_reason, usage: comp.usage };

  const cs = await client.completions.create({ model, prompt, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null;
  for await (const c of cs) {
    if (c.choices?.length) text += c.choices[0].text ?? "";
    if (c.usage) usage = c.usage;
  }
  out.completionStream = { text, usage };

  // stop: a word from the middle of the chat answer above (same prompt, so
  // the same text) must end the answer before it, with finish "stop".
  const stopWord = out.chat.text.trim().split(" ").find((w, i, a) => i >= a.length / 2 && w.length >= 4);
  const stopped = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }], max_tokens: 12, stop: [stopWord] });
  out.stop = { word: stopWord, text: stopped.choices[0].message.content, finish: stopped.choices[0].finish_reason };
  const two = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, n: 2 });
  out.n = two.choices.map((c) => c.message.content);
  try {
    const tc = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, tool_choice: "required",
      tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", required: ["city"], properties: { city: { type: "string" } } } } }] });
    const call = tc.choices[0].message.tool_calls?.[0];
    out.tools = { status: 200, finish: tc.choices[0].finish_reason, name: call?.function?.name ?? null, arguments: call?.function?.arguments ?? null };
  } catch (e) { out.tools = { ...errInfo(e), param: e?.param ?? e?.error?.param ?? null }; }
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 1000000 });
    out.tooLong = { status: 200 };
  } catch (e) { out.tooLong = { ...errInfo(e), param: e?.param ?? e?.error?.param ?? null }; }
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4, stop: 123 });
    out.badStop = { status: 200 };
  } catch (e) { out.badStop = { ...errInfo(e), param: e?.param ?? e?.error?.param ?? null }; }
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: -5 });
    out.badRequest = { status: 200 };
  } catch (e) { out.badRequest = errInfo(e); }
  try {
    await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
    out.badModel = { status: 200 };
  } catch (e) { out.badModel = errInfo(e); }
  return out;
}

// load sends n streamed requests, conc at a time, and records each outcome.
async function load() {
  const n = opts.n ?? 40, conc = opts.concurrency ?? 4;
  const results = new Array(n);
  let next = 0;
  async function one(i) {
    try {
      const r = await chatStream([{ role: "user", content: words(200, 1000 + i) }], { max_tokens: opts.maxTokens ?? 64 });
      results[i] = { ok: true, tokens: r.usage?.completion_tokens ?? 0 };
    } catch (e) { results[i] = { ok: false, ...errInfo(e) }; }
    console.error(`done ${i} ${results[i].ok ? "ok" : "error"}`); // progress, for the test driving us
  }
  await Promise.all(Array.from({ length: conc }, async () => {
    while (next < n) { const i = next++; await one(i); }
  }));
  return { results };
}

// routing is the field report's experiment: warm each shared prefix once, then
// send n requests drawn round the prefixes, each with a unique suffix. It
// reports each request's cached tokens; the Go test, which has the tokenizer,
// decides which of them covered the shared prefix's full blocks.
async function routing() {
  const prefixes = opts.prefixes ?? 5, n = opts.n ?? 60, nwords = opts.prefixWords ?? 1500;
  const texts = Array.from({ length: prefixes }, (_, k) => `Document ${k}. ` + words(nwords, 100 + k));
  async function send(k, suffix) {
    const { data, response } = await client.chat.completions.create({
      model: opts.model, max_tokens: 4,
      messages: [{ role: "system", content: texts[k] }, { role: "user", content: suffix }],
    }).withResponse();
    return {
      k, worker: response.headers.get("x-switchyard-worker"),
      prompt: data.usage.prompt_tokens, cached: data.usage.prompt_tokens_details?.cached_tokens ?? 0,
    };
  }
  for (let k = 0; k < prefixes; k++) await send(k, "warm-up");
  // Prefixes are drawn pseudo-randomly (seeded), not in rotation, so that a
  // round-robin router cannot line up with them by accident.
  let x = 0x9e3779b9 ^ (opts.seed ?? 1);
  const rows = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    rows.push(await send(x % prefixes, `question ${i}: ` + words(6, 5000 + i)));
  }
  return { prefixTexts: texts, rows };
}

const scenarios = {
  basic, load, routing,
  responses: () => responses(client, opts, words),
  messages: () => messages(baseURL, opts, words),
};
if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}; want one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
if (!opts.model && scenario !== "basic") {
  const models = await client.models.list();
  opts.model = models.data[0].id;
}
try {
  console.log(JSON.stringify(await scenarios[scenario]()));
} catch (e) {
  console.error("e2e client failed:", e);
  process.exit(1);
}
