#!/usr/bin/env bash
# Start-up and footprint of the release build (issue 8). Prints one report and exits 1 if a budget
# fails.
#
#   scripts/startup.sh            build (release), then measure
#   scripts/startup.sh --no-build measure the binaries already in target/
#
# What it measures:
#   ready     time from process start until the Lambda binary polls for its first event: a minimal
#             local Runtime API (python3, loopback) records when GET /2018-06-01/runtime/invocation/next
#             arrives, and the binary finds it through AWS_LAMBDA_RUNTIME_API, with the environment
#             Lambda gives it (region, credentials, 128 MB). Median of STARTUP_RUNS runs (default 20).
#             Also the binary's resident memory at that moment.
#   peak RSS  `dedup replay` over every call of the replay corpus (tests/corpus/*.jsonl, both sides
#             of every pair, as Bedrock events) plus events/*.json, each sent REPLAY_REPEAT times
#             (default 10), in-memory store, demo tool in-process; once in order, once 64 at a time.
#             /usr/bin/time -v reports the peak.
#   size      the release `bootstrap` (stripped) and its zip (zip -9, as a Lambda deployment).
#
# Build: `cargo lambda build --release` when cargo-lambda is installed (Lambda's target), otherwise a
# host `cargo build --release`; the report says which. Budgets: ready < 50 ms, peak RSS < 40 MB,
# zip < 10 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=1
[[ ${1:-} == --no-build ]] && build=0
runs=${STARTUP_RUNS:-20}
repeat=${REPLAY_REPEAT:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if command -v cargo-lambda >/dev/null 2>&1; then
    how="cargo lambda build --release (Lambda target)"
    [[ $build == 1 ]] && cargo lambda build --release --bin toolcall-dedup >&2
    bootstrap=$(ls target/lambda/toolcall-dedup/bootstrap 2>/dev/null || true)
    # The replay CLI runs on this machine.
    [[ $build == 1 ]] && cargo build --release --bin dedup >&2
    host_bootstrap=target/release/toolcall-dedup
    [[ $build == 1 ]] && cargo build --release --bin toolcall-dedup >&2
else
    how="cargo build --release (host target; cargo-lambda is not installed)"
    [[ $build == 1 ]] && cargo build --release --bin toolcall-dedup --bin dedup >&2
    bootstrap=target/release/toolcall-dedup
    host_bootstrap=$bootstrap
fi
dedup=target/release/dedup
for f in "$bootstrap" "$host_bootstrap" "$dedup"; do
    [[ -x $f ]] || { echo "missing $f (run without --no-build)" >&2; exit 2; }
done

# ---------------------------------------------------------------------------------------------
# size
cp "$bootstrap" "$work/bootstrap"
(cd "$work" && zip -q -9 bootstrap.zip bootstrap)
bootstrap_bytes=$(stat -c %s "$work/bootstrap")
zip_bytes=$(stat -c %s "$work/bootstrap.zip")

# ---------------------------------------------------------------------------------------------
# ready: a Runtime API that records the first poll, then holds it until the process is killed
ready_json=$(python3 - "$host_bootstrap" "$runs" <<'PY'
import http.server, json, os, statistics, subprocess, sys, threading, time

binary, runs = sys.argv[1], int(sys.argv[2])
NEXT = "/2018-06-01/runtime/invocation/next"

class State:
    polled = threading.Event()
    release = threading.Event()
    at = None
    pid = None
    rss_kb = None

def status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None

class Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == NEXT and not State.polled.is_set():
            State.at = time.monotonic()
            State.rss_kb = status_kb(State.pid, "VmRSS")
            State.polled.set()
        State.release.wait(30)  # no event: the poll stays open until the run ends

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]
env = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
    "AWS_LAMBDA_FUNCTION_NAME": "toolcall-dedup",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128",
    "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/toolcall-dedup",
    "AWS_LAMBDA_LOG_STREAM_NAME": "local",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
    "AWS_EC2_METADATA_DISABLED": "true",
    "DEDUP_TABLE_NAME": "toolcall-dedup",
    "DEDUP_ROUTES": '{"*": "toolcall-dedup-demo-tool"}',
}
def measure(env):
    times, rss = [], []
    for i in range(runs):
        State.polled.clear(); State.release.clear(); State.at = None
        start = time.monotonic()
        proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        State.pid = proc.pid
        if not State.polled.wait(10):
            proc.kill()
            err = proc.communicate()[1].decode(errors="replace")
            print(json.dumps({"error": f"no poll within 10 s; exit {proc.returncode}: {err[-2000:]}"}))
            sys.exit(0)
        times.append((State.at - start) * 1000)
        if State.rss_kb:
            rss.append(State.rss_kb)
        proc.kill(); proc.wait()
        State.release.set()
    return {
        "median_ms": round(statistics.median(times), 2),
        "min_ms": round(min(times), 2),
        "max_ms": round(max(times), 2),
        "rss_at_ready_mb": round(statistics.median(rss) / 1024, 1) if rss else None,
    }

# The AWS SDK's HTTPS clients load the system's root certificates at start-up (rustls-native-certs):
# with no SSL_CERT_FILE that is every file in the probed directories (on Debian, /etc/ssl/certs holds
# one bundle plus ~150 single-certificate files); Lambda's Amazon Linux images keep one bundle. Both
# are measured; SSL_CERT_FILE=<the bundle> makes the SDK read just that file.
bundle = next((p for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
               if os.path.exists(p)), None)
result = {"runs": runs, "host": measure(env)}
if bundle:
    result["bundle"] = measure({**env, "SSL_CERT_FILE": bundle})
    result["bundle_file"] = bundle
print(json.dumps(result))
PY
)
if [[ $ready_json == *'"error"'* ]]; then
    echo "start-up: $ready_json" >&2
    exit 1
fi

# ---------------------------------------------------------------------------------------------
# peak RSS while replaying the corpus
mkdir -p "$work/events"
python3 - "$root/tests/corpus" "$work/events" <<'PY'
import json, pathlib, sys

corpus, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
TYPES = {str: "string", bool: "boolean", int: "number", float: "number", list: "array"}
n = 0
for section in ("retries", "distinct", "adversarial"):
    for line in (corpus / f"{section}.jsonl").read_text(encoding="utf-8").splitlines():
        pair = json.loads(line)
        for side in ("a", "b"):
            s = pair[side]
            try:
                args = json.loads(s["args"])
            except ValueError:
                continue  # the corpus has a few deliberately broken argument texts
            if not isinstance(args, dict):
                continue
            params = []
            for name, value in args.items():
                if value is None:
                    continue
                declared = TYPES.get(type(value), "string")
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                if isinstance(value, bool):
                    text = "true" if value else "false"
                params.append({"name": name, "type": declared, "value": text})
            event = {
                "messageVersion": "1.0",
                "agent": {"name": "replay", "id": "REPLAYAGNT", "alias": "TSTALIASID", "version": "DRAFT"},
                "inputText": f"corpus {pair['id']}",
                "sessionId": s["run_id"],
                "actionGroup": "corpus",
                "function": pair["tool"],
                "parameters": params,
                "sessionAttributes": {"dedup_step": str(s["step"])},
                "promptSessionAttributes": {},
            }
            n += 1
            (out / f"corpus-{n:04d}.json").write_text(json.dumps(event, ensure_ascii=False), encoding="utf-8")

PY
cp events/*.json "$work/events/" 2>/dev/null || true
event_files=("$work"/events/*.json)

peak_rss() { # concurrency
    DEMO_LEDGER="$work/ledger-$1.jsonl" /usr/bin/time -v "$dedup" replay --repeat "$repeat" \
        --concurrency "$1" "${event_files[@]}" >"$work/summary-$1.json" 2>"$work/time-$1.txt" || {
        tail -20 "$work/time-$1.txt" >&2
        exit 1
    }
    awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time-$1.txt"
}
rss1_kb=$(peak_rss 1)
rss64_kb=$(peak_rss 64)
summary1=$(tail -1 "$work/summary-1.json")

# ---------------------------------------------------------------------------------------------
python3 - "$how" "$bootstrap_bytes" "$zip_bytes" "$ready_json" "$rss1_kb" "$rss64_kb" "${#event_files[@]}" "$repeat" "$summary1" <<'PY'
import json, sys

how, boot, zipped, ready, rss1, rss64, files, repeat, summary = sys.argv[1:]
ready = json.loads(ready)
boot, zipped, rss1, rss64 = int(boot), int(zipped), int(rss1), int(rss64)
mb = lambda b: b / 1024 / 1024
peak = max(rss1, rss64) / 1024
def shown(r):
    return (f"{r['median_ms']} ms median of {ready['runs']} (min {r['min_ms']}, max {r['max_ms']}); "
            f"RSS at ready {r['rss_at_ready_mb']} MB")
checks = [
    ("ready, host certificate store", shown(ready["host"]), ready["host"]["median_ms"] < 50, "< 50 ms"),
]
if "bundle" in ready:
    checks.append((f"ready, one CA bundle (SSL_CERT_FILE)", shown(ready["bundle"]),
                   ready["bundle"]["median_ms"] < 50, "< 50 ms"))
checks += [
    ("peak RSS, dedup replay of the corpus", f"{rss1 / 1024:.1f} MB in order, {rss64 / 1024:.1f} MB 64 at a time "
     f"({files} event files × {repeat}; summary {summary})", peak < 40, "< 40 MB"),
    ("bootstrap size", f"{mb(boot):.1f} MB ({boot} bytes, stripped)", True, "-"),
    ("bootstrap zip", f"{mb(zipped):.1f} MB ({zipped} bytes, zip -9)", mb(zipped) < 10, "< 10 MB"),
]
print(f"build: {how}")
failed = False
for name, value, ok, budget in checks:
    verdict = "ok" if ok else "OVER BUDGET"
    failed |= not ok
    print(f"{name:<40} {value}   [{budget}: {verdict}]")
sys.exit(1 if failed else 0)
PY
