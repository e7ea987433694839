#!/usr/bin/env python3
"""Function calling in `infer serve` (tools, tool_choice, tool_calls, role "tool").

    serve_tools_test.py PATH_TO_INFER TEMPLATE_DIR

stories260K (../shared, INFER_SHARED_DIR overrides; without it SKIPPED: and
exit 77) cannot call tools by itself, so the server is started with
--chat-template-file and a real template of each family (tests/data/
chat_templates), and the model is made to write a call with the `grammar`
field (a grammar that derives exactly one text). Checked:
  - rendering: a request with tools, an assistant tool_calls message and a
    tool message renders (POST /apply-template) exactly what Python's jinja2
    renders for the same template and context (Qwen2.5, Llama 3.1, Mistral
    v0.3; skipped without python3-jinja2);
  - parsing: message.tool_calls / finish_reason "tool_calls", streamed
    delta.tool_calls, text around calls, malformed calls left as content;
  - tool_choice none / required / named (forced by a grammar), bad shapes 400,
    tools with a built-in (non-Jinja) template 400.
"""
import json
import os
import sys
import tempfile

import serve_util

INFER, TDIR = sys.argv[1], sys.argv[2]
MODEL = serve_util.shared_model_or_skip()

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    jinja2 = None

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   - {name}")
    else:
        failed += 1
        print(f"FAIL - {name}")
        if detail:
            print("       " + str(detail)[:2000].replace("\n", "\n       "))


class Server(serve_util.Server):
    def __init__(self, *args):
        super().__init__(INFER, MODEL, *args)

    def chat_stream(self, body):
        """A streamed chat request: (status, [events], saw [DONE])."""
        st, events, done, _ = self.stream("/v1/chat/completions", dict(body, stream=True))
        return st, [e for e in events if "_bad" not in e], done


def gbnf_literal(text):
    """A GBNF rule deriving exactly `text`."""
    out = ""
    for ch in text:
        if ch == '"' or ch == "\\":
            out += "\\" + ch
        elif ch == "\n":
            out += "\\n"
        else:
            out += ch
    return 'root ::= "' + out + '"\n'


def jinja2_render(template, context):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise RuntimeError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(**context)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "enum": ["Paris", "Rome"]},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time (UTC)",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}},
]
ARGS = {"location": "Paris", "unit": "celsius"}
# The conversation as the OpenAI API gives it: arguments as JSON text.
API_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 22}"},
]
# The same as the server gives it to the template (Hugging Face's convention):
# arguments as an object, null content as "", a tool result named after the
# function it answers.
TEMPLATE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
    {"role": "tool", "content": "{\"temperature\": 22}", "tool_call_id": "call12345", "name": "get_weather"},
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def gguf_with_template(src, dst, template):
    """A copy of the GGUF file `src` with tokenizer.chat_template = template."""
    import struct
    with open(src, "rb") as f:
        data = f.read()
    assert data[:4] == b"GGUF"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def skip_value(pos, t):
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, pos)
            return pos + 8 + n
        if t == 9:
            et, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(count):
                pos = skip_value(pos, et)
            return pos
        return pos + sizes[t]

    kv_start = pos
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        (t,) = struct.unpack_from("<I", data, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, pos + 4)
        pos = skip_value(pos + 4, t)
    kv_end = pos
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4 + 8
    infos_end = pos
    data_start = (infos_end + alignment - 1) // alignment * alignment
    key, val = b"tokenizer.chat_template", template.encode()
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val
    head = data[:4] + struct.pack("<IQQ", version, n_tensors, n_kv + 1) + data[kv_start:kv_end] + kv + data[kv_end:infos_end]
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head + data[data_start:])


def read_template(name):
    with open(os.path.join(TDIR, name), encoding="utf-8", newline="") as f:
        return f.read()


def check_render(srv, tname, messages=API_MESSAGES, template_messages=TEMPLATE_MESSAGES):
    st, d = srv.post("/apply-template", {"messages": messages, "tools": TOOLS})
    check(f"{tname}: /apply-template renders tools, tool_calls and a tool result", st == 200 and isinstance(d.get("prompt"), str), d)
    if st != 200:
        return
    prompt = d["prompt"]
    check(f"{tname}: the tools and the call's arguments are in the prompt",
          "get_weather" in prompt and "Current weather in a city" in prompt and '"location": "Paris"' in prompt, prompt)
    if jinja2 is None:
        print(f"SKIPPED: {tname}: comparison with jinja2 (python3-jinja2 is not installed)")
        return
    ctx = {"messages": template_messages, "tools": TOOLS, "add_generation_prompt": True,
           "bos_token": "<s>", "eos_token": "</s>", "documents": None}
    want = jinja2_render(read_template(tname), ctx)
    check(f"{tname}: the prompt is byte for byte what jinja2 renders", prompt == want,
          "ours:\n" + prompt + "\njinja2:\n" + want)


def forced(srv, text, **extra):
    body = {"messages": ASK, "tools": TOOLS, "max_tokens": 200, "temperature": 0, "grammar": gbnf_literal(text)}
    body.update(extra)
    return srv.post("/v1/chat/completions", body)


def streamed_calls(events):
    content, calls, reasons = "", [], []
    for e in events:
        for ch in e.get("choices", []):
            d = ch.get("delta", {})
            content += d.get("content") or ""
            calls += d.get("tool_calls") or []
            if ch.get("finish_reason"):
                reasons.append(ch["finish_reason"])
    return content, calls, reasons


# ---- no Jinja template: stories260K's built-in chatml fallback ----
srv = Server()
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "max_tokens": 4})
check("built-in template: tools are a 400 that says a Jinja template is needed",
      st == 400 and "Jinja" in d["error"]["message"] and d["error"]["param"] == "tools", d)
st, d = srv.post("/v1/chat/completions", {"messages": ASK + API_MESSAGES[2:], "max_tokens": 4})
check("built-in template: tool_calls / tool messages are a 400", st == 400 and "Jinja" in d["error"]["message"], d)
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 4})
check("built-in template: tool_choice none renders without the tools", st == 200, d)
srv.stop()

# ---- Qwen2.5 (Hermes <tool_call> format) ----
QWEN = "qwen2.5-7b-instruct.jinja"
srv = Server("--chat-template-file", os.path.join(TDIR, QWEN))
check("the log names the tool-call format", any("tool calls: hermes" in l for l in srv.log), srv.log)
check_render(srv, QWEN)

call_text = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}\n</tool_call>'
st, d = forced(srv, call_text)
ok = st == 200 and d["choices"][0]["finish_reason"] == "tool_calls"
msg = d["choices"][0]["message"] if st == 200 else {}
calls = msg.get("tool_calls") or []
check("qwen: a <tool_call> becomes message.tool_calls, finish_reason tool_calls, content null",
      ok and msg.get("content") is None and len(calls) == 1 and calls[0]["type"] == "function"
      and calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "get_weather"
      and json.loads(calls[0]["function"]["arguments"]) == ARGS, d)

two = 'Let me check.\n' + call_text + '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
st, d = forced(srv, two)
msg = d["choices"][0]["message"] if st == 200 else {}
calls = msg.get("tool_calls") or []
check("qwen: two calls and the text before them", st == 200 and msg.get("content") == "Let me check." and len(calls) == 2
      and calls[1]["function"]["name"] == "get_time" and calls[0]["id"] != calls[1]["id"], d)

st, events, done = srv.chat_stream({"messages": ASK, "tools": TOOLS, "max_tokens": 200, "temperature": 0, "grammar": gbnf_literal(two)})
content, scalls, reasons = streamed_calls(events)
check("qwen streamed: content, then delta.tool_calls (index, id, type, name, arguments), finish_reason tool_calls, [DONE]",
      st == 200 and done and content == "Let me check." and [c["index"] for c in scalls] == [0, 1]
      and all(c["id"].startswith("call_") and c["type"] == "function" for c in scalls)
      and [c["function"]["name"] for c in scalls] == ["get_weather", "get_time"]
      and json.loads(scalls[0]["function"]["arguments"]) == ARGS and reasons == ["tool_calls"], events)
check("qwen streamed: no piece of the calls leaks into content",
      all("<tool" not in (ch.get("delta", {}).get("content") or "") for e in events for ch in e.get("choices", [])), events)

bad = '<tool_call>\n{"name": "get_weather", "arguments": {"location": }\n</tool_call>'
st, d = forced(srv, bad)
check("qwen: a call whose JSON does not parse stays content (finish_reason stop)",
      st == 200 and d["choices"][0]["message"]["content"] == bad and "tool_calls" not in d["choices"][0]["message"]
      and d["choices"][0]["finish_reason"] == "stop", d)
st, events, done = srv.chat_stream({"messages": ASK, "tools": TOOLS, "max_tokens": 200, "temperature": 0, "grammar": gbnf_literal(bad)})
content, scalls, reasons = streamed_calls(events)
check("qwen streamed: the malformed call is released as content", st == 200 and done and content == bad and not scalls
      and reasons == ["stop"], events)

st, d = forced(srv, call_text, tool_choice="none")
check("tool_choice none: the reply is not parsed", st == 200 and d["choices"][0]["message"]["content"] == call_text
      and d["choices"][0]["finish_reason"] == "stop", d)
st, d = srv.post("/apply-template", {"messages": ASK, "tools": TOOLS, "tool_choice": "none"})
check("tool_choice none: the tools are not given to the template", st == 200 and "get_weather" not in d["prompt"], d)

st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 300, "temperature": 0,
                                          "parallel_tool_calls": False})
calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
check("tool_choice required: a grammar makes the model call a declared tool with valid arguments",
      st == 200 and calls and len(calls) == 1 and d["choices"][0]["finish_reason"] == "tool_calls"
      and calls[0]["function"]["name"] in ("get_weather", "get_time")
      and isinstance(json.loads(calls[0]["function"]["arguments"]), dict), d)
# With parallel calls allowed the grammar lets a call follow a call (this
# model never stops on its own: it writes calls until max_tokens).
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 100, "temperature": 0})
calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
check("tool_choice required, parallel calls: every call complete is returned",
      st == 200 and calls and all(c["function"]["name"] in ("get_weather", "get_time") for c in calls), d)
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "max_tokens": 300, "temperature": 0,
                                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
check("tool_choice named: exactly that function, arguments valid against its schema",
      st == 200 and calls and len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
      and json.loads(calls[0]["function"]["arguments"]).get("location") in ("Paris", "Rome")
      and json.loads(calls[0]["function"]["arguments"]).get("unit") in ("celsius", "fahrenheit"), d)
st, events, done = srv.chat_stream({"messages": ASK, "tools": TOOLS, "max_tokens": 300, "temperature": 0,
                               "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
content, scalls, reasons = streamed_calls(events)
check("tool_choice named, streamed", st == 200 and done and len(scalls) == 1 and scalls[0]["function"]["name"] == "get_time"
      and reasons == ["tool_calls"], events)

st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "max_tokens": 30, "temperature": 0})
st2, events, done = srv.chat_stream({"messages": ASK, "tools": TOOLS, "max_tokens": 30, "temperature": 0})
content, scalls, reasons = streamed_calls(events)
check("tools offered, no call made: plain text, the same streamed and not",
      st == 200 and st2 == 200 and "tool_calls" not in d["choices"][0]["message"] and not scalls
      and content == d["choices"][0]["message"]["content"] and reasons == [d["choices"][0]["finish_reason"]], (d, events))

BAD_SHAPES = [
    ("tools not an array", {"tools": {"type": "function"}}, "tools"),
    ("a tool not an object", {"tools": ["get_time"]}, "tools[0]"),
    ("a tool of another type", {"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0].type"),
    ("a tool without a function", {"tools": [{"type": "function"}]}, "tools[0].function"),
    ("a function without a name", {"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
    ("a name not a string", {"tools": [{"type": "function", "function": {"name": 5}}]}, "tools[0].function.name"),
    ("parameters not an object", {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters"),
    ("two tools of one name", {"tools": [TOOLS[1], TOOLS[1]]}, "tools[1].function.name"),
    ("tool_choice unknown", {"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ("tool_choice naming no tool", {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ("tool_choice required without tools", {"tool_choice": "required"}, "tool_choice"),
    ("tool_choice required with a grammar", {"tools": TOOLS, "tool_choice": "required", "grammar": 'root ::= "x"'}, "tool_choice"),
    ("a tool message without tool_call_id", {"messages": ASK + [{"role": "tool", "content": "1"}]}, "messages[1].tool_call_id"),
    ("tool_calls not an array", {"messages": ASK + [{"role": "assistant", "tool_calls": {}}]}, "messages[1].tool_calls"),
    ("arguments that are not JSON", {"messages": ASK + [{"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_time", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
]
for name, extra, param in BAD_SHAPES:
    body = {"messages": ASK, "max_tokens": 2}
    body.update(extra)
    st, d = srv.post("/v1/chat/completions", body)
    check(f"400 for {name}", st == 400 and isinstance(d, dict) and d.get("error", {}).get("param") == param, (st, d))
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "parallel_tool_calls": False,
                                          "tools": [{"type": "function", "function": {"name": "f", "strict": True, "x-extra": 1}, "extra": 2}]})
check("unknown fields of tools are ignored", st == 200, d)
srv.stop()

# ---- Qwen3 and Hermes 2 Pro (the same format): rendering ----
for name in ("qwen3-0.6b.jinja", "hermes-2-pro-llama-3-8b.jinja"):
    srv = Server("--chat-template-file", os.path.join(TDIR, name))
    check_render(srv, name)
    srv.stop()

# ---- the model's own template: a copy of stories260K whose GGUF carries Qwen2.5's ----
with tempfile.TemporaryDirectory() as tmp:
    own = os.path.join(tmp, "stories260K-qwen-template.gguf")
    gguf_with_template(MODEL, own, read_template(QWEN))
    MODEL_SAVED, MODEL = MODEL, own
    srv = Server()
    MODEL = MODEL_SAVED
    check("own template: the log says Jinja and the hermes format", any("(Jinja), tool calls: hermes" in l for l in srv.log), srv.log)
    check_render(srv, QWEN)
    st, d = forced(srv, call_text)
    calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
    check("own template: a <tool_call> is parsed", st == 200 and calls and calls[0]["function"]["name"] == "get_weather", d)
    srv.stop()

# ---- Llama 3.1 (JSON format) ----
LLAMA = "llama3.1-8b-instruct.jinja"
srv = Server("--chat-template-file", os.path.join(TDIR, LLAMA))
check("llama3.1: the log names the tool-call format", any("tool calls: llama3" in l for l in srv.log), srv.log)
check_render(srv, LLAMA)
st, d = forced(srv, '{"name": "get_weather", "parameters": {"location": "Paris", "unit": "celsius"}}')
msg = d["choices"][0]["message"] if st == 200 else {}
calls = msg.get("tool_calls") or []
check("llama3.1: a JSON reply naming a tool is a call", st == 200 and msg.get("content") is None and len(calls) == 1
      and json.loads(calls[0]["function"]["arguments"]) == ARGS and d["choices"][0]["finish_reason"] == "tool_calls", d)
st, d = forced(srv, '{"answer": 42}')
check("llama3.1: other JSON stays content", st == 200 and d["choices"][0]["message"]["content"] == '{"answer": 42}'
      and "tool_calls" not in d["choices"][0]["message"], d)
st, d = srv.post("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 300, "temperature": 0})
calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
check("llama3.1: tool_choice required", st == 200 and calls and calls[0]["function"]["name"] in ("get_weather", "get_time"), d)
srv.stop()

# ---- Mistral v0.3 ([TOOL_CALLS] format; tool call ids of 9 characters) ----
MISTRAL = "mistral-7b-instruct-v0.3.jinja"
srv = Server("--chat-template-file", os.path.join(TDIR, MISTRAL))
m_api = [dict(m) for m in API_MESSAGES[1:]]
m_api[1] = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]}
m_api[2] = {"role": "tool", "tool_call_id": "abcdefghi", "content": "{\"temperature\": 22}"}
m_tmpl = [dict(m) for m in TEMPLATE_MESSAGES[1:]]
m_tmpl[1] = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]}
m_tmpl[2] = {"role": "tool", "content": "{\"temperature\": 22}", "tool_call_id": "abcdefghi", "name": "get_weather"}
check_render(srv, MISTRAL, m_api, m_tmpl)
st, d = forced(srv, '[TOOL_CALLS][{"name": "get_time", "arguments": {}}]')
calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
check("mistral: [TOOL_CALLS][...] is a call", st == 200 and calls and calls[0]["function"]["name"] == "get_time", d)
srv.stop()

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
