// The npm `openai` client library against `infer serve` (tests/serve_openai_test.sh).
// BASE_URL, API_KEY: the server's; prints "ok   - ..." / "FAIL - ..." lines
// and "N passed, N failed".
const OpenAI = require("openai");

const base = process.env.BASE_URL;
const client = new OpenAI({ baseURL: base, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 120000 });
let passed = 0, failed = 0;
function check(name, ok, detail) {
  if (ok) { passed++; console.log(`ok   - ${name}`); }
  else { failed++; console.log(`FAIL - ${name}`); if (detail !== undefined) console.log("       " + JSON.stringify(detail).slice(0, 1500)); }
}
async function attempt(name, fn) {
  try { await fn(); } catch (e) { check(name, false, String(e && e.stack || e)); }
}

// A small JSON-schema validator for the shapes the test asks for.
function validate(schema, v) {
  if (schema.enum) return schema.enum.some((x) => JSON.stringify(x) === JSON.stringify(v));
  switch (schema.type) {
    case "object":
      if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
      for (const k of schema.required || []) if (!(k in v)) return false;
      for (const [k, s] of Object.entries(schema.properties || {})) if (k in v && !validate(s, v[k])) return false;
      if (schema.additionalProperties === false) for (const k of Object.keys(v)) if (!(k in (schema.properties || {}))) return false;
      return true;
    case "array":
      if (!Array.isArray(v)) return false;
      if (schema.minItems !== undefined && v.length < schema.minItems) return false;
      if (schema.maxItems !== undefined && v.length > schema.maxItems) return false;
      return v.every((x) => validate(schema.items || {}, x));
    case "string": return typeof v === "string";
    case "integer": return Number.isInteger(v);
    case "number": return typeof v === "number";
    case "boolean": return typeof v === "boolean";
    default: return true;
  }
}

async function main() {
  const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "Once upon a time" }];
  let greedy = "";

  await attempt("models.list", async () => {
    const page = await client.models.list();
    check("models.list names the model", page.data.length === 1 && page.data[0].id === "stories260K.gguf", page.data);
  });

  await attempt("completions.create", async () => {
    const r = await client.completions.create({ model: "stories260K.gguf", prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
    check("completions.create: greedy text and usage", r.choices[0].text.startsWith(", there was a little girl") &&
      r.usage.prompt_tokens === 5 && r.usage.completion_tokens === 24, r);
  });

  await attempt("chat.completions.create", async () => {
    const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 16, temperature: 0 });
    greedy = r.choices[0].message.content;
    check("chat.completions.create: an assistant message", r.object === "chat.completion" && r.choices[0].message.role === "assistant" &&
      typeof greedy === "string" && greedy.length > 0, r);
  });

  await attempt("chat stream with usage", async () => {
    const stream = await client.chat.completions.create({ model: "m", messages, max_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true } });
    let text = "", usage = null, finish = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta && c.delta.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    check("chat stream: deltas add up to the non-streamed greedy reply", text === greedy, { text, greedy });
    check("chat stream: a usage chunk and a finish_reason", usage && usage.completion_tokens > 0 &&
      usage.total_tokens === usage.prompt_tokens + usage.completion_tokens && (finish === "stop" || finish === "length") && chunks > 2,
      { usage, finish, chunks });
  });

  await attempt("n > 1", async () => {
    const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 8, temperature: 1, n: 3, seed: 5 });
    check("n = 3 gives three choices", r.choices.length === 3 && r.choices.map((c) => c.index).join() === "0,1,2", r.choices);
  });

  await attempt("stop", async () => {
    const r = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 40, temperature: 0, stop: ["Lily"] });
    check("stop: cut before the stop string, finish_reason stop",
      r.choices[0].text === ", there was a little girl named " && r.choices[0].finish_reason === "stop", r.choices[0]);
  });

  await attempt("logprobs", async () => {
    const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3 });
    const lp = r.choices[0].logprobs;
    const ok = lp && Array.isArray(lp.content) && lp.content.length === r.usage.completion_tokens && lp.content.every((t) =>
      typeof t.token === "string" && t.logprob <= 0 && Array.isArray(t.bytes) && t.top_logprobs.length === 3 &&
      t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob && Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
    check("logprobs: one entry per token with 3 top_logprobs; greedy picks the top one", ok, lp);
    check("logprobs: the tokens spell the reply", lp && lp.content.map((t) => t.token).join("") === r.choices[0].message.content,
      lp && lp.content.map((t) => t.token));
  });

  await attempt("json_schema", async () => {
    // Bounded strings: a small model would otherwise write prose until max_tokens.
    const schema = { type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" },
      mood: { enum: ["happy", "sad"] }, tags: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 3 } },
      required: ["name", "age", "mood", "tags"], additionalProperties: false };
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 300, temperature: 1, seed,
        response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } } });
      let parsed = null, err = null;
      try { parsed = JSON.parse(r.choices[0].message.content); } catch (e) { err = String(e); }
      check(`json_schema (seed ${seed}): the reply parses and validates`, parsed !== null && validate(schema, parsed) &&
        r.choices[0].finish_reason === "stop" && Object.keys(parsed).join() === "name,age,mood,tags",
        { content: r.choices[0].message.content, err });
    }
    // json_object: any object, as long as the model likes (this small model
    // writes prose inside strings until max_tokens): every reply opens an
    // object, and the finished ones parse as objects.
    let bad = [];
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 60, temperature: 1, seed,
        response_format: { type: "json_object" } });
      const c = r.choices[0];
      if (!c.message.content.trimStart().startsWith("{")) bad.push(c.message.content);
      if (c.finish_reason === "stop") {
        try { const v = JSON.parse(c.message.content); if (typeof v !== "object" || Array.isArray(v)) bad.push(c.message.content); }
        catch (e) { bad.push(c.message.content); }
      }
    }
    check("json_object: every reply opens a JSON object; the finished ones parse", bad.length === 0, bad);
  });

  await attempt("cancelled stream", async () => {
    const before = await disconnected();
    const stream = await client.completions.create({ model: "m", prompt: "Once", max_tokens: 1500, ignore_eos: true, stream: true, n: 4 });
    let got = 0;
    for await (const chunk of stream) { if (++got >= 3) break; }  // leaving the loop aborts the request
    let after = before;
    for (let i = 0; i < 100 && after <= before; i++) { await new Promise((r) => setTimeout(r, 100)); after = await disconnected(); }
    check("a cancelled stream cancels the request on the server", got === 3 && after > before, { got, before, after });
  });

  await attempt("API key", async () => {
    const bad = new OpenAI({ baseURL: base, apiKey: "wrong-key", maxRetries: 0 });
    try {
      await bad.chat.completions.create({ model: "m", messages, max_tokens: 2 });
      check("a wrong API key fails with AuthenticationError", false, "no error");
    } catch (e) {
      check("a wrong API key fails with AuthenticationError (401)", e instanceof OpenAI.AuthenticationError && e.status === 401, String(e));
    }
  });

  await attempt("embeddings.create", async () => {
    const input = ["Once upon a time", "there was a little girl", "who liked to play"];
    // encoding_format "float": the numbers as JSON.
    const f = await client.embeddings.create({ model: "m", input, encoding_format: "float" });
    const dim = f.data[0] && f.data[0].embedding.length;
    check("embeddings.create (float): one vector per input, in order, with usage",
      f.object === "list" && f.data.length === 3 && f.data.every((d, i) => d.object === "embedding" && d.index === i &&
        Array.isArray(d.embedding) && d.embedding.length === dim && d.embedding.every((x) => typeof x === "number")) &&
      dim > 0 && f.usage.prompt_tokens > 0 && f.usage.total_tokens === f.usage.prompt_tokens, f);
    const norm = Math.sqrt(f.data[0].embedding.reduce((a, x) => a + x * x, 0));
    check("embeddings.create (float): rows are L2-normalized", Math.abs(norm - 1) < 1e-4, norm);
    // No encoding_format: the client asks for base64 and decodes it itself.
    const b = await client.embeddings.create({ model: "m", input });
    let worst = 0;
    for (let i = 0; i < 3; i++)
      for (let j = 0; j < dim; j++) worst = Math.max(worst, Math.abs(b.data[i].embedding[j] - f.data[i].embedding[j]));
    check("embeddings.create (base64, decoded by the client) equals the float answer",
      b.data.length === 3 && b.data.every((d) => d.embedding.length === dim) && worst < 1e-6, { worst, dim });
    const b2 = await client.embeddings.create({ model: "m", input: "Once upon a time", encoding_format: "base64" });
    check("embeddings.create (explicit base64, one string)", b2.data.length === 1 &&
      b2.data[0].embedding.length === dim && Math.abs(b2.data[0].embedding[0] - f.data[0].embedding[0]) < 1e-6, b2.data.length);
    const d = await client.embeddings.create({ model: "m", input, dimensions: 8, encoding_format: "float" });
    const dn = Math.sqrt(d.data[0].embedding.reduce((a, x) => a + x * x, 0));
    check("embeddings.create dimensions: 8 values, normalized again", d.data.every((r) => r.embedding.length === 8) &&
      Math.abs(dn - 1) < 1e-4, d.data[0]);
    try {
      await client.embeddings.create({ model: "m", input: [] });
      check("embeddings.create with no input is refused", false);
    } catch (e) {
      check("embeddings.create with no input: a 400 APIError", e instanceof OpenAI.APIError && e.status === 400, String(e));
    }
  });

  await attempt("bad request", async () => {
    try {
      await client.chat.completions.create({ model: "m", messages, max_tokens: 2, temperature: "hot" });
      check("a bad field fails with BadRequestError", false, "no error");
    } catch (e) {
      check("a bad field fails with BadRequestError (400) naming it", e instanceof OpenAI.BadRequestError && e.status === 400 &&
        e.param === "temperature", String(e));
    }
  });

  // Function calling, against the server with a Qwen2.5 chat template: a
  // grammar makes the model write the call (stories260K would not by itself).
  const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather in a city",
    parameters: { type: "object", properties: { location: { type: "string", enum: ["Paris", "Rome"] } }, required: ["location"] } } }];
  const toolsClient = new OpenAI({ baseURL: process.env.TOOLS_BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 120000 });
  const callText = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>';
  const grammar = "root ::= " + JSON.stringify(callText) + "\n";
  const toolMessages = [{ role: "user", content: "Weather in Paris?" }];
  await attempt("tools", async () => {
    const r = await toolsClient.chat.completions.create({ model: "m", messages: toolMessages, tools, max_tokens: 300, temperature: 0, grammar });
    const m = r.choices[0].message;
    check("tools: message.tool_calls with the arguments as JSON text, finish_reason tool_calls", r.choices[0].finish_reason === "tool_calls" &&
      m.content === null && m.tool_calls.length === 1 && m.tool_calls[0].type === "function" && m.tool_calls[0].id.startsWith("call_") &&
      m.tool_calls[0].function.name === "get_weather" && JSON.parse(m.tool_calls[0].function.arguments).location === "Paris", r);
    // The call and its result sent back: the conversation renders and generates.
    const r2 = await toolsClient.chat.completions.create({ model: "m", tools, max_tokens: 8, temperature: 0,
      messages: [...toolMessages, m, { role: "tool", tool_call_id: m.tool_calls[0].id, content: '{"temperature": 22}' }] });
    check("tools: the assistant's tool_calls and a tool message are accepted back", r2.choices[0].message.role === "assistant", r2);
  });
  await attempt("tools streamed", async () => {
    const stream = await toolsClient.chat.completions.create({ model: "m", messages: toolMessages, tools, max_tokens: 300, temperature: 0,
      grammar, stream: true });
    const calls = []; let finish = null; let content = "";
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      if (c.delta.tool_calls) calls.push(...c.delta.tool_calls);
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    check("tools streamed: one delta.tool_calls, finish_reason tool_calls", calls.length === 1 && calls[0].index === 0 &&
      calls[0].function.name === "get_weather" && JSON.parse(calls[0].function.arguments).location === "Paris" &&
      finish === "tool_calls" && content === "", { calls, finish, content });
  });
  await attempt("tool_choice named", async () => {
    const r = await toolsClient.chat.completions.create({ model: "m", messages: toolMessages, tools, max_tokens: 300, temperature: 0,
      tool_choice: { type: "function", function: { name: "get_weather" } } });
    const tc = r.choices[0].message.tool_calls;
    check("tool_choice named: the model is made to call it", tc && tc.length === 1 && tc[0].function.name === "get_weather" &&
      typeof JSON.parse(tc[0].function.arguments).location === "string", r);
  });

  // runTools end to end against `infer synth --preset tiny-chat` (random
  // weights, a byte-level BPE vocabulary and its own ChatML template with
  // tools): the client forces a call of its function, the grammar makes the
  // model write it, and the runner parses it and calls the function, all
  // within 64 tokens. The city is an enum: a random model's free string has
  // no reason to end (its closing quote is one token among hundreds), which
  // no grammar can fix honestly; whitespace, which the grammar does bound, was
  // what used to eat the budget.
  check("the tiny-chat server's URL is given (CHAT_BASE_URL)", !!process.env.CHAT_BASE_URL);
  if (process.env.CHAT_BASE_URL) {
    const chatClient = new OpenAI({ baseURL: process.env.CHAT_BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 120000 });
    const params = { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome", "Tokyo", "Lima"] } },
      required: ["city"], additionalProperties: false };
    // The whitespace the JSON grammars allow between tokens: one space or
    // tab, or a newline and at most 16 spaces (no runs of blank lines).
    const gaps = (text) => {
      let t = text.replace(/"(?:[^"\\]|\\.)*"/g, '""');  // strings' contents are not gaps
      if ((t.match(/"/g) || []).length % 2) t = t.slice(0, t.lastIndexOf('"'));  // nor an unfinished one's (max_tokens)
      return t.match(/[ \t\r\n]+/g) || [];
    };
    const badGap = (g) => !/^(?:[ \t]|\n {0,16})$/.test(g);
    await attempt("tiny-chat: json_schema and json_object whitespace", async () => {
      const bad = [];
      for (const seed of [1, 2, 3, 4]) {
        for (const response_format of [{ type: "json_schema", json_schema: { name: "w", schema: params, strict: true } },
          { type: "json_object" }]) {
          const r = await chatClient.chat.completions.create({ model: "tiny-chat.gguf", max_tokens: 64, temperature: 1, seed,
            messages: [{ role: "user", content: "Answer in JSON." }], response_format });
          const text = r.choices[0].message.content;
          if (gaps(text).some(badGap)) bad.push({ seed, type: response_format.type, text });
        }
      }
      check("tiny-chat: JSON output has no whitespace runs between tokens (one space, or a newline and an indent)", bad.length === 0, bad);
    });
    for (const [temperature, seed] of [[0, 1], [1, 1], [1, 2], [1, 3], [1, 4]]) {
      await attempt(`runTools (temperature ${temperature}, seed ${seed})`, async () => {
        const got = [];
        const runner = chatClient.chat.completions.runTools({ model: "tiny-chat.gguf", max_tokens: 64, temperature, seed,
          messages: [{ role: "user", content: "What is the weather in Paris?" }],
          tool_choice: { type: "function", function: { name: "get_weather" } },
          tools: [{ type: "function", function: { name: "get_weather", description: "Current weather in a city", parameters: params,
            parse: JSON.parse, function: async (args) => { got.push(args); return { city: args.city, celsius: 21 }; } } }] });
        await runner.done();
        const done = runner.allChatCompletions();
        const c = done[0];
        check(`runTools (temperature ${temperature}, seed ${seed}): one forced call, within 64 tokens, the function called with valid arguments`,
          done.length === 1 && c.choices[0].finish_reason === "tool_calls" && c.usage.completion_tokens <= 64 &&
          got.length === 1 && validate(params, got[0]) && Object.keys(got[0]).join() === "city",
          { completions: done.map((x) => ({ finish: x.choices[0].finish_reason, usage: x.usage, message: x.choices[0].message })), got });
      });
    }
  }

  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

async function disconnected() {
  const res = await fetch(base.replace(/\/v1$/, "") + "/metrics", { headers: { Authorization: `Bearer ${process.env.API_KEY}` } });
  const text = await res.text();
  let n = 0;
  for (const line of text.split("\n")) if (line.startsWith("infer_requests_ended_total") && line.includes('outcome="disconnected"')) n += Number(line.split(" ").pop());
  return n;
}

main().catch((e) => { console.log("FAIL - " + e); process.exit(1); });
