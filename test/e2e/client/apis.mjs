// Scenarios for the Responses API (official openai client) and the
// Messages API (official @anthropic-ai/sdk client). Each returns one JSON
// object the Go e2e tests assert on.
import Anthropic from "@anthropic-ai/sdk";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// The packages' exports maps hide their .d.ts files from require.resolve.
const pkgFile = (f) => join(here, "node_modules", f);

// declared reads the stream event types an SDK declares in its type
// definitions: the literal `type: '...'` of each event interface.
function declared(file, pattern) {
  const text = readFileSync(pkgFile(file), "utf8");
  return [...new Set([...text.matchAll(pattern)].map((m) => m[1]))];
}
const responseEvents = () =>
  declared("openai/resources/responses/responses.d.ts", /type: '(response\.[a-z_.]+|error)';/g);
const messageEvents = () => {
  const d = readFileSync(pkgFile("@anthropic-ai/sdk/resources/messages/messages.d.ts"), "utf8");
  const out = new Set();
  for (const m of d.matchAll(/export interface Raw\w*Event \{([\s\S]*?)\n\}/g)) {
    const t = m[1].match(/\n    type: '([a-z_]+)';/);
    if (t) out.add(t[1]);
  }
  return [...out];
};

// goldenEvents lists the event names of a golden SSE transcript.
function goldenEvents(name) {
  const text = readFileSync(join(here, "..", "..", "..", "internal", "openai", "testdata", name), "utf8");
  return [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
}

function errInfo(e) {
  return { status: e?.status ?? null, body: e?.error ?? null, message: String(e?.message ?? e) };
}

function routeHeaders(response) {
  return {
    worker: response.headers.get("x-switchyard-worker"),
    source: response.headers.get("x-switchyard-overlap-source"),
    overlap: Number(response.headers.get("x-switchyard-overlap-tokens") ?? 0),
    policy: response.headers.get("x-switchyard-policy"),
  };
}

export async function responses(client, opts, words) {
  const model = opts.model;
  const out = { declared: responseEvents(), golden: goldenEvents("responses_stream.golden") };
  out.model = await client.models.retrieve(model);
  const instructions = "You route freight cars. " + words(opts.words ?? 1200, 11);

  const first = await client.responses.create({ model, instructions, input: "Which track for car 1?", max_output_tokens: 8, metadata: { run: "e2e" }, store: true }).withResponse();
  out.first = { id: first.data.id, status: first.data.status, text: first.data.output_text, usage: first.data.usage, route: routeHeaders(first.response) };

  const again = await client.responses.create({ model, instructions, input: "Which track for car 2?", max_output_tokens: 8 }).withResponse();
  out.again = { status: again.data.status, text: again.data.output_text, usage: again.data.usage, route: routeHeaders(again.response) };

  const { data: stream, response } = await client.responses.create({ model, instructions, input: "Which track for car 3?", max_output_tokens: 8, stream: true }).withResponse();
  const types = [];
  let text = "", usage = null, status = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") { usage = ev.response.usage; status = ev.response.status; }
  }
  out.stream = { types, text, usage, status, route: routeHeaders(response) };

  const next = await client.responses.create({ model, previous_response_id: out.first.id, input: "And car 4?", max_output_tokens: 4 }).withResponse();
  out.next = { status: next.data.status, usage: next.data.usage, route: routeHeaders(next.response) };

  try {
    await client.responses.create({ model, input: [{ role: "user", content: null }] });
    out.bad = { status: 200 };
  } catch (e) { out.bad = errInfo(e); }
  return out;
}

export async function messages(baseURL, opts, words) {
  const client = new Anthropic({ baseURL, apiKey: opts.apiKey ?? "unused", maxRetries: 0, timeout: 60_000 });
  const model = opts.model;
  const out = { declared: messageEvents(), golden: goldenEvents("anthropic_stream.golden") };
  const system = "You route freight cars. " + words(opts.words ?? 1200, 13);

  const first = await client.messages.create({ model, max_tokens: 8, system, messages: [{ role: "user", content: "Which track for car 1?" }], metadata: { user_id: "e2e" } }).withResponse();
  out.first = { id: first.data.id, type: first.data.type, role: first.data.role, stop: first.data.stop_reason, text: first.data.content.map((b) => b.text).join(""), usage: first.data.usage, route: routeHeaders(first.response) };

  const again = await client.messages.create({ model, max_tokens: 8, system, messages: [{ role: "user", content: [{ type: "text", text: "Which track for car 2?" }] }] }).withResponse();
  out.again = { stop: again.data.stop_reason, usage: again.data.usage, route: routeHeaders(again.response) };

  const { data: stream, response } = await client.messages.create({ model, max_tokens: 8, system, stream: true, messages: [{ role: "user", content: "Which track for car 3?" }] }).withResponse();
  const types = [];
  let text = "", usage = null, stop = null, inputAtStart = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "message_start") inputAtStart = ev.message.usage.input_tokens;
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    if (ev.type === "message_delta") { usage = ev.usage; stop = ev.delta.stop_reason; }
  }
  out.stream = { types, text, usage, stop, inputAtStart, route: routeHeaders(response) };

  // The SDK's own accumulation of a stream.
  const final = await client.messages.stream({ model, max_tokens: 6, system, messages: [{ role: "user", content: "Which track for car 4?" }] }).finalMessage();
  out.final = { stop: final.stop_reason, text: final.content.map((b) => b.text).join(""), usage: final.usage };

  out.count = await client.messages.countTokens({ model, system, messages: [{ role: "user", content: "Which track for car 1?" }] });

  try {
    await client.messages.create({ model, max_tokens: 0, messages: [{ role: "user", content: "x" }] });
    out.bad = { status: 200 };
  } catch (e) { out.bad = errInfo(e); }
  return out;
}
