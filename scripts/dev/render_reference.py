#!/usr/bin/env python3
"""Render the conversations in tests/unit/engine/data/chat/cases.json with the
real Jinja chat templates in ../shared/templates, or tests/unit/engine/data/chat/templates for
those added since (HF transformers' environment:
trim_blocks, lstrip_blocks, tojson with ensure_ascii=False) and write the
expected prompts the C++ renderer is tested against. Needs only jinja2.

usage: scripts/dev/render_reference.py            # rewrite tests/unit/engine/data/chat/*.txt
"""
import json, os, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "templates")
DATA = os.path.join(ROOT, "tests", "unit", "engine", "data", "chat")

FAMILIES = {  # family -> (template file, bos, eos)
    "chatml": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "hermes": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "llama3": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "phi3": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    "phi4": ("microsoft-phi-4.jinja", "<|endoftext|>", "<|im_end|>"),
    # microsoft/Phi-4-mini-instruct's tokenizer_config.json: bos and eos "<|endoftext|>"
    "phi4-mini": ("microsoft-Phi-4-mini-instruct.jinja", "<|endoftext|>", "<|endoftext|>"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", "", "<|im_end|>"),
    "gemma": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    "deepseek-r1-distill-llama": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜begin▁of▁sentence｜>",
                                  "<｜end▁of▁sentence｜>"),
    "deepseek-r1-distill-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
                                 "<｜end▁of▁sentence｜>"),
    "harmony": ("openai-gpt-oss-120b.jinja", "", "<|return|>"),
}

# The date the Harmony template prints with strftime_now: fixed, as the C++ renderer fixes it
# (chat::harmony_date_string), so prompts are byte-identical from day to day.
HARMONY_DATE = "2025-08-05"

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def to_hf(messages):
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{"id": c.get("id", ""), "type": "function",
                                "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out

def main():
    cases = json.load(open(os.path.join(DATA, "cases.json")))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    for fam, (fname, bos, eos) in FAMILIES.items():
        path = os.path.join(SHARED, fname)
        if not os.path.exists(path):
            path = os.path.join(DATA, "templates", fname)
        tmpl = env.from_string(open(path).read())
        for case in cases:
            if fam not in case["families"] and fam.split(".")[0] not in case["families"]:
                continue
            kw = dict(messages=to_hf(case["messages"]), bos_token=bos, eos_token=eos,
                      add_generation_prompt=case.get("add_generation_prompt", True))
            if case.get("tools"):
                kw["tools"] = case["tools"]
            if fam == "harmony":  # (Llama 3.2's template also calls strftime_now when defined)
                kw["strftime_now"] = lambda fmt: HARMONY_DATE
            text = tmpl.render(**kw)
            with open(os.path.join(DATA, f"{fam}.{case['name']}.txt"), "w") as f:
                f.write(text)
            print(fam, case["name"], len(text))

if __name__ == "__main__":
    main()
