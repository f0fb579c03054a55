#!/usr/bin/python3
"""Reference chat prompts from Python Jinja2 exactly as Hugging Face's apply_chat_template
renders them (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
tojson, raise_exception and strftime_now), for the C++ interpreter's comparison test
(src/model/chat_template_hf_test.cc). Needs Debian's python3-jinja2; run under /usr/bin/python3.

  hf_render.py OUT.json CONVERSATIONS.json TOKENIZER_CONFIG.json|TEMPLATE.jinja...

(a bare .jinja template is rendered with bos_token "<s>" and eos_token "</s>").

Each tokenizer_config.json's chat_template is rendered for every conversation x
add_generation_prompt (on, off) x enable_thinking (unset, true, false); a render that raises
is recorded with its error instead of an output.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit("hf_render.py: python3-jinja2 is missing (Debian: apt-get install python3-jinja2; "
             "scripts/deps.sh build test installs it)")

# The date strftime_now() reports, so outputs do not depend on the day the test runs; the C++
# side injects the same one.
FIXED_NOW = datetime(2024, 7, 26, 10, 30, 0)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(cfg, key):
    v = cfg.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def template_of(cfg):
    t = cfg.get("chat_template")
    if isinstance(t, list):
        t = next((x["template"] for x in t if x.get("name") == "default"), None)
    return t


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out_path, conv_path, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(conv_path, encoding="utf-8") as f:
        conversations = json.load(f)
    env = make_env()
    result = {"jinja2": jinja2.__version__, "templates": []}
    for path in configs:
        with open(path, encoding="utf-8") as f:
            if path.endswith(".jinja"):  # a bare template (TLR's own test templates)
                cfg = {"chat_template": f.read(), "bos_token": "<s>", "eos_token": "</s>"}
            else:
                cfg = json.load(f)
        source = template_of(cfg)
        if source is None:
            sys.exit(f"hf_render.py: {path} has no chat_template")
        bos, eos = token_text(cfg, "bos_token"), token_text(cfg, "eos_token")
        template = env.from_string(source)
        cases = []
        for ci, messages in enumerate(conversations):
            for gen in (True, False):
                for thinking in (None, True, False):
                    kwargs = {"messages": messages, "tools": None, "documents": None,
                              "add_generation_prompt": gen}
                    if bos is not None:
                        kwargs["bos_token"] = bos
                    if eos is not None:
                        kwargs["eos_token"] = eos
                    if thinking is not None:
                        kwargs["enable_thinking"] = thinking
                    case = {"conversation": ci, "add_generation_prompt": gen,
                            "enable_thinking": thinking}
                    try:
                        case["output"] = template.render(**kwargs)
                    except Exception as e:  # the C++ side must fail too
                        case["error"] = f"{type(e).__name__}: {e}"
                    cases.append(case)
        result["templates"].append({"config": path, "bos_token": bos, "eos_token": eos, "cases": cases})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
