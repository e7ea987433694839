#!/usr/bin/env python3
"""The chat-template interpreter (lib/tokenizer/jinja.*) against Python's jinja2.

Every template in tests/data/chat_templates (real templates of each family;
see the README there) and a set of small templates exercising single
constructs is rendered on a set of conversations by libinfer
(tests/jinja_render.cpp) and by jinja2 set up as Hugging Face's
apply_chat_template sets it up (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols, tojson as json.dumps with ensure_ascii=False, raise_exception,
strftime_now). The outputs must be byte-identical; where jinja2 raises through
raise_exception, libinfer must fail with the same message; where jinja2 fails
otherwise, libinfer must fail too.

Usage: chat_template_check.py JINJA_RENDER TEMPLATE_DIR
Exit 77 (skipped) when jinja2 is not installed.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("SKIPPED: python3-jinja2 is not installed")
    sys.exit(77)

NOW = 1721995200  # 2024-07-26 12:00:00 UTC: strftime_now's time on both sides


class Raised(Exception):
    pass


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise Raised(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city, e.g. San Francisco, CA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time (UTC) — no arguments",
        "parameters": {"type": "object", "properties": {}}}},
]

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello"}
A1 = {"role": "assistant", "content": " Hi there! "}
U2 = {"role": "user", "content": "Who are you?"}
UNI = {"role": "user", "content": "  Ünïcødé — 你好 😀 \"quotes\" 'single' \\ back\ttab\n  "}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function",
     "function": {"name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_current_weather",
          "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"}
THINK = {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"}

CONVERSATIONS = {
    "system_multiturn_gen": {"messages": [SYS, U1, A1, U2], "add_generation_prompt": True},
    "system_multiturn_nogen": {"messages": [SYS, U1, A1, U2], "add_generation_prompt": False},
    "nosystem_gen": {"messages": [U1, A1, U2], "add_generation_prompt": True},
    "ends_with_assistant": {"messages": [U1, A1], "add_generation_prompt": False},
    "single_user": {"messages": [U1], "add_generation_prompt": True},
    "unicode_whitespace": {"messages": [SYS, UNI], "add_generation_prompt": True},
    "tools_listed": {"messages": [SYS, U2], "tools": TOOLS, "add_generation_prompt": True},
    "tool_call_roundtrip": {"messages": [U2, CALL, RESULT], "tools": TOOLS, "add_generation_prompt": True},
    "thinking": {"messages": [U1, THINK, U2], "add_generation_prompt": True},
    "thinking_disabled": {"messages": [U1, THINK, U2], "add_generation_prompt": True, "enable_thinking": False},
    "roles_not_alternating": {"messages": [U1, U2], "add_generation_prompt": True},
    "assistant_first": {"messages": [A1, U1], "add_generation_prompt": True},
    "two_systems": {"messages": [SYS, SYS, U1], "add_generation_prompt": True},
    "empty": {"messages": [], "add_generation_prompt": True},
}

BASE = {"bos_token": "<s>", "eos_token": "</s>", "tools": None, "documents": None}

# Small templates, one construct family each (rendered on the first conversation
# plus the variables below).
CONSTRUCTS = {
    "loop_vars": "{% for m in messages %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
                 "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem is defined }}"
                 "/{{ loop.cycle('a', 'b') }};{% endfor %}",
    "loop_else_filter": "{% for m in messages if m.role == 'user' %}{{ m.content }},{% else %}none{% endfor %}"
                        "{% for x in [] %}x{% else %}empty{% endfor %}",
    "loop_controls": "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "loop_scope": "{% set x = 'top' %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}",
    "namespace": "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                 "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "if_elif": "{% for i in range(4) %}{% if i == 0 %}zero{% elif i == 1 %}one{% elif i is even %}even{% else %}odd{% endif %} {% endfor %}",
    "whitespace": "  {% if true %}\n    a\n  {% endif %}\n  {%- if true -%}  b  {%- endif %}\n{{- ' c ' -}}\n  d {%+ if true %}e{% endif %}\n{# comment #}\n  {# indented comment #}\nf\n\n",
    "whitespace_var_lines": "x\n  {{ 'y' }}\n  {% set z = 1 %}\n{{ z }}   {% if 1 %}w{% endif %}\n",
    "strings": "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|"
               "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a b  c '.split(none, 1) }}|{{ 'a\tb'.split(maxsplit=0) }}|{{ 'abc'.startswith('ab') }}|"
               "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}|{{ 'hello world'.title() }}|"
               "{{ 'hELLO'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ '-'.join(['x', 'y']) }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.count('b') }}",
    "string_index": "{{ 'héllo'[1] }}{{ 'héllo'[-1] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ 'héllo'|length }}{{ 'abcdef'[::2] }}{{ 'abc'[5:] }}",
    "lists": "{{ messages[1:]|length }} {{ messages[-1].role }} {{ [1, 2, 3][::-1] }} {{ [1, 2] + [3] }} {{ [0] * 3 }}"
             " {{ (1, 2) | list }} {{ [3, 1][0] }} {{ [] | first is defined }} {{ [1, 2, 3] | last }}",
    "dicts": "{% set d = {'b': 1, 'a': [1, 'x', none, true, 1.5]} %}{{ d }} {{ d.b }} {{ d['a'][1] }} {{ d.get('c', 'dflt') }} "
             "{{ d.get('b') }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d | items %}{{ k }}{% endfor %}"
             " {{ d.keys() | list }} {{ 'a' in d }} {{ d | length }} {{ d.missing is defined }} {% for k in d %}{{ k }}{% endfor %}",
    "arith": "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 4 / 2 }}"
             " {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 123456789.125 }} {{ -0.0 }} {{ 10 - 3 - 2 }} {{ 'a' ~ 1 ~ none ~ true }}"
             " {{ 3 * 'ab' }} {{ 'x' + 'y' }} {{ -(3) }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 ** -1 }}",
    "logic": "{{ true and 'x' }} {{ false or 'y' }} {{ none or 0 }} {{ not none }} {{ 1 if 0 else 2 }} {{ 'a' if true }}|{{ 'b' if false }}|"
             "{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'ell' in 'hello' }} {{ 3 not in [1, 2] }} {{ [1] == [1] }} {{ true == 1 }}"
             " {{ not 1 == 2 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }}",
    "tests": "{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }}"
             " {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ false is false }} {{ 3 is odd }}"
             " {{ 4 is divisibleby(2) }} {{ 'a' is equalto('a') }} {{ 1 is not none }} {{ range is callable }} {{ 2 is in [1, 2] }}"
             " {{ 'abc' is lower }} {{ x is undefined }} {{ 5 is ge(5) }} {{ 4 is divisibleby 3 }}",
    "filters": "{{ '  x  ' | trim }}|{{ 'xyx' | trim('x') }}|{{ messages | length }}|{{ 'aB' | upper }}{{ 'aB' | lower }}|{{ x | default('d') }}"
               "|{{ '' | default('e', true) }}|{{ [3, 4] | first }}{{ [3, 4] | last }}|{{ [1, 2] | join(', ') }}"
               "|{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"
               "|{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }}|{{ 5 | string }}{{ '7' | int + 1 }}"
               "|{{ '3.5' | float }}|{{ 'x' | int }}|{{ 'a-b' | replace('-', '+') }}|{{ 'hello world' | capitalize }}|{{ 'a b-c' | title }}"
               "|{{ -3 | abs }}|{{ [1, 2] | reverse | list }}|{{ 'abc' | reverse }}|{{ [1, 0, 2] | select | list }}|{{ [1, 0, 2] | reject | list }}"
               "|{{ ['a', 'b'] | map('upper') | list }}|{{ {'k': 'v'} | items | list }}|{{ 'x' | safe }}|{{ 1.9 | int }}|{{ [1, 2] | count }}"
               "|{{ [0, 1, 2, 3] | select('odd') | list }}|{{ messages | map(attribute='missing', default='?') | join }}",
    "tojson": "{{ tools | tojson }}\n{{ tools[0] | tojson(indent=4) }}\n{{ {'s': 'é\\n\"\\\\', 'f': 1.0, 'n': none, 'b': false, 'l': []} | tojson }}"
              "\n{{ 'ü' | tojson }}{{ 3 | tojson }}{{ {} | tojson(indent=2) }}",
    "set_block": "{% set greeting %}Hello {{ messages[0].role }}!{% endset %}[{{ greeting }}]",
    "macros": "{% macro tag(name, value='v', sep=':') %}<{{ name }}{{ sep }}{{ value }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}"
              "{{ tag('c', sep='=') }}{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
    "literals": "{{ 'a' \"b\" 'c' }} {{ \"it's\" }} {{ '\\x41\\u00e9\\t|' }} {{ True }} {{ None }} {{ 1_000 }} {{ 1.5e3 }}",
    "syntax_error": "{{ 0x }}",
    "print_values": "{{ messages[0] }} {{ [none, 1.0, 'q\\'s'] }} {{ {'a': {'b': [1]}} }} {{ 1.0 }} {{ 100000000000000000000.0 }}",
    "raise_message": "{% if messages | length > 0 %}{{ raise_exception('Bad: ' ~ messages[0].role) }}{% endif %}",
    "undefined_attr": "{{ foo.bar }}",
    "undefined_ok": "[{{ foo }}][{{ foo | length }}][{% for x in foo %}{% endfor %}][{{ messages[0].nothing }}][{{ messages[99] }}]",
    "strftime": "{{ strftime_now('%d %b %Y') }}",
    "type_error": "{{ 1 + 'a' }}",
    "is_not_chain": "{% if messages[0]['role'] is not defined or messages[0].content is not string %}x{% else %}y{% endif %}",
    "loop_nested": "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "unpack_items": "{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}{{ v }}{% if not loop.last %},{% endif %}{% endfor %}",
    "indent": "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'x\n\ny\n' | indent('> ', blank=true) }}|"
              "{{ tools[0] | tojson(indent=2) | indent(4) }}",
    "call_block": "{% macro box(title) %}[{{ title }}: {{ caller() }}]{% endmacro %}{% set who = 'outer' %}"
                  "{% call box('t') %}{{ who }} {{ messages | length }}{% endcall %}"
                  "{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}{% for i in [1, 2] %}{% call twice() %}{{ i }}{% endcall %}{% endfor %}"
                  "{% macro inner() %}<i>{% endmacro %}{% call box(inner()) %}b{% endcall %}",
    "generation_tag": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}",
}
# jinja2 needs the extension for {% generation %}; without it both must fail.
CONSTRUCTS_SKIP_JINJA2 = {"generation_tag"}


def run_ours(binary, template, context, workdir):
    tpath = os.path.join(workdir, "t.jinja")
    cpath = os.path.join(workdir, "c.json")
    with open(tpath, "w", encoding="utf-8", newline="") as f:
        f.write(template)
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(context, f, ensure_ascii=False)
    env = dict(os.environ, TZ="UTC")
    p = subprocess.run([binary, tpath, cpath, str(NOW)], capture_output=True, env=env, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8", "replace").strip()


def run_jinja2(env, template, context):
    try:
        return 0, env.from_string(template).render(**context), ""
    except Raised as e:
        return 2, "", str(e)
    except Exception as e:  # noqa: BLE001 - any other failure of jinja2
        return 3, "", "%s: %s" % (type(e).__name__, e)


def compare(name, binary, env, template, context, workdir, results):
    want_rc, want_out, want_err = run_jinja2(env, template, context)
    rc, out, err = run_ours(binary, template, context, workdir)
    ok = False
    if want_rc == 0:
        ok = rc == 0 and out == want_out
    elif want_rc == 2:
        ok = rc == 2 and err == "RAISED: " + want_err
    else:
        ok = rc in (2, 3) and not err.startswith("ERROR unsupported") and (
            not err.startswith("ERROR syntax") or want_err.startswith("TemplateSyntaxError"))
    results.append((name, ok, want_rc, rc))
    if not ok:
        print("MISMATCH %s" % name)
        print("  jinja2 (%d): %r %s" % (want_rc, want_out[:800], want_err))
        print("  ours   (%d): %r %s" % (rc, out[:800], err))
    return want_rc


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, tdir = sys.argv[1], sys.argv[2]
    env = make_env()
    os.environ["TZ"] = "UTC"
    results = []
    rendered = {}
    with tempfile.TemporaryDirectory() as workdir:
        names = sorted(f for f in os.listdir(tdir) if f.endswith(".jinja"))
        if len(names) < 10:
            print("FAILED: expected the chat template fixtures in %s" % tdir)
            return 1
        for fname in names:
            with open(os.path.join(tdir, fname), encoding="utf-8", newline="") as f:
                template = f.read()
            for cname, conv in CONVERSATIONS.items():
                ctx = dict(BASE)
                ctx.update(conv)
                if compare("%s/%s" % (fname, cname), binary, env, template, ctx, workdir, results) == 0:
                    rendered[fname] = rendered.get(fname, 0) + 1
        for cname, template in CONSTRUCTS.items():
            ctx = dict(BASE)
            ctx.update(CONVERSATIONS["system_multiturn_gen"])
            ctx["tools"] = TOOLS
            if cname in CONSTRUCTS_SKIP_JINJA2:
                rc, out, err = run_ours(binary, template, ctx, workdir)
                ok = rc == 0 and out == " Hi there! "
                results.append(("construct/" + cname, ok, 0, rc))
                if not ok:
                    print("MISMATCH construct/%s: %d %r %s" % (cname, rc, out, err))
                continue
            compare("construct/" + cname, binary, env, template, ctx, workdir, results)
    failed = [r for r in results if not r[1]]
    for fname in names:
        if rendered.get(fname, 0) == 0:
            print("FAILED: %s rendered no conversation in jinja2 (check the fixture)" % fname)
            failed.append((fname, False, 0, 0))
    by_rc = {}
    for r in results:
        by_rc[r[2]] = by_rc.get(r[2], 0) + 1
    print("%d cases (%d rendered by jinja2, %d raised, %d failed otherwise), %d templates: %d mismatches"
          % (len(results), by_rc.get(0, 0), by_rc.get(2, 0), by_rc.get(3, 0), len(names), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
