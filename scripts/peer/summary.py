"""Summarizes a raw `scripts/peer-powertools` run (the JSON lines `run.py` records) into one
Markdown table, and with --json one object as the last stdout line:

  {"systems": {"powertools": M, "toolcall_dedup": M},
   "overhead_ratio_first_sight": r, "overhead_ratio_repeat": r,
   "cold_start": {"powertools": {"first_answer_ms": x, "rss_mb": y}, "toolcall_dedup": {...}},
   "outage": {"powertools": {"fail_closed_ms": x, "requests": n}, "toolcall_dedup": {...}}}

(`cold_start`: medians over fresh processes, when the run made them; `outage`: the median of the
interleaved store-outage runs with each run's figure in `runs_ms`, or, in a run recorded without
them, the behaviours' one outage.)

M = {retries_caught, retries_total, false_merges, distinct_total, requests_first_sight,
     requests_repeat, overhead_us_first_sight, overhead_us_repeat}; ratios are toolcall-dedup's
overhead divided by Powertools' (default configuration). Overhead is the handler's own work:
process CPU time per invocation minus the tool's, median over the corpus; the table also gives
wall-clock latency (which includes the local server's time). Standard library only: the test suite
runs it on a recorded run (tests/it/peer_powertools.rs).

Usage: python3 summary.py RAW.jsonl [--json]
"""

import json
import statistics
import sys
from collections import Counter, defaultdict

SYSTEMS = ("powertools", "powertools_parameters", "toolcall_dedup")
COLUMNS = {
    "powertools": "Powertools `@idempotent` (default: whole event)",
    "powertools_parameters": 'Powertools, `event_key_jmespath="parameters"`',
    "toolcall_dedup": "toolcall-dedup",
}


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def metrics(records: list[dict], system: str) -> dict:
    pairs = [r for r in records if r["kind"] == "pair" and r["system"] == system]
    retries = [p for p in pairs if p["class"] == "retry"]
    distinct = [p for p in pairs if p["class"] == "deliberate_repeat"]
    timing = defaultdict(list)
    for r in records:
        if r["kind"] == "timing" and r["system"] == system:
            timing[r["phase"]].append(r)

    def requests(phase: str) -> float:
        rows = timing[phase]
        return round(sum(sum(r["requests"].values()) for r in rows) / len(rows), 2) if rows else 0.0

    def overhead(phase: str, clock: str = "cpu_us") -> float:
        rows = timing[phase]
        return round(statistics.median(r[f"handler_{clock}"] - r[f"tool_{clock}"] for r in rows), 1) if rows else 0.0

    return {
        "retries_caught": sum(1 for p in retries if p["executions"] == 1),
        "retries_total": len(retries),
        "false_merges": sum(1 for p in distinct if p["executions"] < 2),
        "distinct_total": len(distinct),
        "requests_first_sight": requests("first_sight"),
        "requests_repeat": requests("repeat"),
        "overhead_us_first_sight": overhead("first_sight"),
        "overhead_us_repeat": overhead("repeat"),
        "latency_us_first_sight": overhead("first_sight", "us"),
        "latency_us_repeat": overhead("repeat", "us"),
    }


def cold_start(records: list[dict], system: str) -> dict | None:
    rows = [r for r in records if r["kind"] == "cold_start" and r["system"] == system]
    if not rows:
        return None
    return {"first_answer_ms": round(statistics.median(r["first_answer_ms"] for r in rows), 1),
            "rss_mb": round(statistics.median(r["rss_mb"] for r in rows), 1), "starts": len(rows)}


def outage(records: list[dict], system: str) -> dict | None:
    runs = [r for r in records if r["kind"] == "outage" and r["system"] == system]
    if runs:  # the interleaved runs: their median, and each run's figure
        return {"fail_closed_ms": round(statistics.median(r["fail_closed_ms"] for r in runs), 1),
                "requests": statistics.median(r["requests"] for r in runs),
                "runs_ms": [r["fail_closed_ms"] for r in runs],
                "tool_called": sum(r["executions"] for r in runs)}
    rec = next((r for r in records if r["kind"] == "behaviour" and r["system"] == system
                and r["scenario"] == "outage"), None)
    if rec is None:
        return None
    return {"fail_closed_ms": rec["steps"][0]["elapsed_ms"], "requests": sum(rec.get("requests", {}).values())}


def request_mix(records: list[dict], system: str, phase: str) -> str:
    rows = [r for r in records if r["kind"] == "timing" and r["system"] == system and r["phase"] == phase]
    per_op = Counter()
    for r in rows:
        per_op.update(r["requests"])
    if not rows:
        return "—"
    parts = [f"{op} {n / len(rows):.3g}" for op, n in sorted(per_op.items())]
    return ", ".join(parts) if parts else "none"


def error_name(step: dict) -> str:
    return (step.get("error") or "").split(":", 1)[0]


def answer(step: dict) -> str:
    """What the caller got, in a few words."""
    if step.get("error"):
        return f"Lambda error `{error_name(step)}`"
    outcome = step.get("outcome")
    if outcome == "replayed" and step.get("state") == "REPROMPT" and "already ran" in (step.get("body_head") or ""):
        # A settled call whose result was too large to store: a notice, not the reply.
        return "REPROMPT (already ran; result too large to replay)"
    named = {
        "executed": "the tool's reply",
        "replayed": "the stored reply",
        "waited": "waited, then the first call's reply",
        "in_progress": "REPROMPT (still in progress)",
        "tool_error": "REPROMPT (tool error)",
        "store_error": "REPROMPT (store unavailable)",
        "bad_request": "a bad-request reply",
    }
    if outcome in named:
        return named[outcome]
    if outcome not in (None, "answered"):  # an outcome this summary does not know yet
        return f"outcome `{outcome}`"
    head = step.get("body_head") or ""
    if head.startswith('"Error:'):
        return "an error reply (" + head.strip('"').split(":", 2)[1].strip() + ")"
    if step.get("state"):
        return f"{step['state']} reply"
    return "the tool's reply" if step.get("receipt") else "a reply"


def records_text(step: dict) -> str:
    states = step.get("records") or []
    return "record " + ("/".join(states) if states else "gone")


def ran(n: int) -> str:
    return f"tool ran {n}×"


def behaviour_cell(scenario: str, rec: dict) -> str:
    steps = rec["steps"]
    if scenario == "in_progress":
        a, b = steps
        got = answer(b)
        if b.get("receipt") and b["receipt"] == a.get("receipt"):
            got = f"the first call's reply after {b['elapsed_ms']:.0f} ms"
        return f"duplicate got {got}; {ran(b['executions'])}"
    if scenario in ("raise", "raise_escape"):
        a, b = steps
        retry = "ran the tool again" if b["executions"] > a["executions"] else answer(b)
        return f"{answer(a)}, {records_text(a)}; retry: {retry}; {ran(b['executions'])}"
    if scenario == "takeover":
        a, b, c = steps
        took_over = b["executions"] >= 2 or (b.get("receipt") and b["receipt"] != a.get("receipt"))
        if not took_over:
            return f"no takeover: second call got {answer(b)}; {ran(c['executions'])}"
        if c.get("receipt") and c["receipt"] == a.get("receipt") and a["receipt"] != b.get("receipt"):
            late = "overwrote the new owner's result (later calls replay the stale one)"
        elif c.get("receipt") and c["receipt"] == b.get("receipt"):
            late = "was refused (later calls replay the new owner's result)"
        else:
            late = f"left {records_text(a)}; later call got {answer(c)}"
        return f"stale owner's completion {late}; {ran(c['executions'])}"
    if scenario == "large_result":
        a, b = steps
        retry = "ran the tool again" if b["executions"] > a["executions"] else answer(b)
        return f"{answer(a)}, {records_text(a)}; retry: {retry}; {ran(b['executions'])}"
    if scenario == "outage":
        (a,) = steps
        called = "called" if a["executions"] else "not called"
        n = sum(rec.get("requests", {}).values())
        return f"tool {called}; caller got {answer(a)} after {a['elapsed_ms']:.0f} ms ({n} requests)"
    return "?"


BEHAVIOURS = (
    ("in_progress", "in-progress duplicate (second call while the first runs 1.5 s)"),
    ("raise", "tool raises after its side effect, then a retry"),
    ("raise_escape", "handler raises after the tool ran (Lambda error), then a retry"),
    ("takeover", "owner outlives its lease; a second call takes over; the owner then completes"),
    ("large_result", "result over 400 KB (600 KB of random text), then a retry"),
    ("outage", "store outage (every DynamoDB request answers 500)"),
)


def ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 3) if theirs else 0.0


def summarize(records: list[dict]) -> tuple[str, dict]:
    m = {s: metrics(records, s) for s in SYSTEMS}
    pt, ours = m["powertools"], m["toolcall_dedup"]
    first = ratio(ours["overhead_us_first_sight"], pt["overhead_us_first_sight"])
    repeat = ratio(ours["overhead_us_repeat"], pt["overhead_us_repeat"])
    rows = [
        ["retries caught (corpus retry pairs: tool ran once)"]
        + [f"{m[s]['retries_caught']}/{m[s]['retries_total']}" for s in SYSTEMS],
        ["false merges (deliberate repeats: tool ran once)"]
        + [f"{m[s]['false_merges']}/{m[s]['distinct_total']}" for s in SYSTEMS],
        ["DynamoDB requests, first sight (mean, at the proxy)"]
        + [f"{m[s]['requests_first_sight']:g} ({request_mix(records, s, 'first_sight')})" for s in SYSTEMS],
        ["DynamoDB requests, repeat"]
        + [f"{m[s]['requests_repeat']:g} ({request_mix(records, s, 'repeat')})" for s in SYSTEMS],
        ["handler overhead, first sight (median CPU µs per invocation, tool excluded)"]
        + [f"{m[s]['overhead_us_first_sight']:.0f}" for s in SYSTEMS[:2]]
        + [f"{ours['overhead_us_first_sight']:.0f} ({first:g}× Powertools)"],
        ["handler overhead, repeat"]
        + [f"{m[s]['overhead_us_repeat']:.0f}" for s in SYSTEMS[:2]]
        + [f"{ours['overhead_us_repeat']:.0f} ({repeat:g}× Powertools)"],
        ["latency, first sight (median wall µs, tool excluded; includes the local server)"]
        + [f"{m[s]['latency_us_first_sight']:.0f}" for s in SYSTEMS],
        ["latency, repeat"] + [f"{m[s]['latency_us_repeat']:.0f}" for s in SYSTEMS],
    ]
    starts = {s: cold_start(records, s) for s in SYSTEMS}
    if starts["toolcall_dedup"] and starts["powertools"]:
        def start_cell(s: str) -> str:
            c = starts[s] or starts["powertools"]  # one Powertools process serves both columns
            return f"{c['first_answer_ms']:.0f} ms, {c['rss_mb']:g} MB"
        rows.append(["cold start: process start to first answer, and peak RSS (median of "
                     f"{starts['toolcall_dedup']['starts']} fresh processes)"]
                    + [start_cell(s) for s in SYSTEMS[:2]]
                    + [start_cell("toolcall_dedup") + " ("
                       + f"{ratio(starts['toolcall_dedup']['first_answer_ms'], starts['powertools']['first_answer_ms']):g}"
                       + "× Powertools' time)"])
    behaviour = {(r["system"], r["scenario"]): r for r in records if r["kind"] == "behaviour"}
    for scenario, title in BEHAVIOURS:
        cells = [behaviour_cell(scenario, behaviour[(s, scenario)]) if (s, scenario) in behaviour else "—"
                 for s in SYSTEMS]
        if any(c != "—" for c in cells):
            rows.append([title] + cells)
    interleaved = {s: outage(records, s) for s in SYSTEMS if any(
        r["kind"] == "outage" and r["system"] == s for r in records)}
    if interleaved:
        n = len(next(iter(interleaved.values()))["runs_ms"])
        rows.append([f"store outage: time to fail closed (median of {n} interleaved runs; each run)"]
                    + [f"{o['fail_closed_ms']:.0f} ms ({', '.join(f'{x:.0f}' for x in o['runs_ms'])})"
                       if (o := interleaved.get(s)) else "—" for s in SYSTEMS])
    header = ["", *(COLUMNS[s] for s in SYSTEMS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    keys = ("retries_caught", "retries_total", "false_merges", "distinct_total", "requests_first_sight",
            "requests_repeat", "overhead_us_first_sight", "overhead_us_repeat")
    summary = {
        "systems": {name: {k: m[name][k] for k in keys} for name in ("powertools", "toolcall_dedup")},
        "overhead_ratio_first_sight": first,
        "overhead_ratio_repeat": repeat,
    }
    for key, measure in (("cold_start", cold_start), ("outage", outage)):
        found = {name: measure(records, name) for name in ("powertools", "toolcall_dedup")}
        if all(found.values()):
            summary[key] = found
    return "\n".join(lines), summary


def problems(records: list[dict]) -> list[str]:
    """Invocations that failed where none should have (corpus and timing runs)."""
    out = []
    for r in records:
        if r["kind"] == "pair" and r["errors"]:
            out.append(f"{r['system']} {r['pair']}: {r['errors'][0]}")
        if r["kind"] == "timing" and r.get("error"):
            out.append(f"{r['system']} {r['event']} {r['phase']}: {r['error']}")
        if r["kind"] == "timing" and r["phase"] == "repeat" and r["executed"]:
            out.append(f"{r['system']} {r['event']}: the exact repeat ran the tool")
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        raise SystemExit(__doc__)
    records = load(args[0])
    table, summary = summarize(records)
    meta = next((r for r in records if r["kind"] == "meta"), {})
    for problem in problems(records):
        print(f"peer-powertools: unexpected: {problem}", file=sys.stderr)
    print(table)
    print()
    print(f"aws-lambda-powertools {meta.get('aws_lambda_powertools')}, boto3 {meta.get('boto3')}, "
          f"moto {meta.get('moto')} (single-threaded) behind a counting proxy; toolcall-dedup {meta.get('driver_build')}; "
          f"{meta.get('started')}, {meta.get('cpus')} CPUs")
    if "--json" in sys.argv[1:]:
        print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
