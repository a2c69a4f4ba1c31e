#!/usr/bin/env python3
"""The article's four keyers, copied verbatim from its listings (with its fixed timestamp regex), plus a
driver that regenerates tests/golden/article.jsonl:

    python3 scripts/article_keyers.py < tests/golden/article_inputs.jsonl > tests/golden/article.jsonl

Each input line is {"tool", "args", "run_id"?, "step"?}; each output line adds the four keys, or an
"error" naming the Python exception (the article's code raises on some inputs)."""
import json, hashlib, re, unicodedata, sys

def _h(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()[:32]

def key_raw(tool, raw, ctx=None):
    return _h(tool + "|" + raw)

def key_canonical(tool, raw, ctx=None):
    obj = json.loads(raw)
    return _h(tool + "|" + json.dumps(obj, sort_keys=True, separators=(",", ":")))

ISO = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?:\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

def _norm(v):                       # branches are exhaustive for json.loads output
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return int(v) if float(v).is_integer() else float(v)
    if isinstance(v, str):
        s = re.sub(r"\s+", " ", unicodedata.normalize("NFC", v).strip())
        if (m := ISO.match(s)):
            head = m.group(1)[:10] + "T" + m.group(1)[11:]
            tz = m.group(2)
            return head + ("Z" if tz in ("Z", "z") else tz)
        if re.fullmatch(r"-?\d+", s):
            return int(s)
        if re.fullmatch(r"-?\d+\.\d+", s):
            f = float(s)
            return int(f) if f.is_integer() else f
        return s.casefold()
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return {k: _norm(x) for k, x in v.items() if x is not None}

def key_normalised(tool, raw, ctx=None):
    obj = {k: _norm(v) for k, v in json.loads(raw).items() if v is not None}
    return _h(tool + "|" + json.dumps(obj, sort_keys=True, separators=(",", ":")))

def key_scoped(tool, raw, ctx=None):
    ctx = ctx or {}
    inner = key_normalised(tool, raw)
    return _h(f"{ctx.get('run_id','-')}|{ctx.get('step','-')}|{inner}")

def main():
    for line in sys.stdin:
        call = json.loads(line)
        ctx = {k: call[k] for k in ("run_id", "step") if k in call}
        out = dict(call)
        for name, fn in [("raw", key_raw), ("canonical", key_canonical),
                         ("normalized", key_normalised), ("scoped", key_scoped)]:
            try:
                out[name] = fn(call["tool"], call["args"], ctx)
            except Exception as e:  # the article's code has no error handling; record what it raises
                out[name] = {"error": type(e).__name__}
        print(json.dumps(out, ensure_ascii=False))

if __name__ == "__main__":
    main()
