"""Drives Powertools and toolcall-dedup with the same events against the same server, and records
every observation as one JSON line (the raw output `summary.py` reads). Run by
`scripts/peer-powertools`, which starts the server, the counting proxy and builds the driver.

Systems (each a worker process speaking the JSON-lines protocol of `powertools_worker.py`):
  powertools             @idempotent, default settings (key: the whole event)
  powertools_parameters  @idempotent with event_key_jmespath="parameters"
  toolcall_dedup         the real handler (examples/peer_driver.rs), DEDUP_POLICY_FILE=events/corpus/policy.json

What it records (`kind`):
  meta        versions and settings of this run
  pair        a corpus pair sent to a clean table: how many times the ledger says the tool ran
  cold_start  a fresh worker process: from its start to its first answer, and its peak RSS
  timing      one invocation: first sight of an event, or its exact repeat; handler and tool time
              (in the worker's process) and the requests the proxy counted during it
  behaviour   one scripted scenario (in-progress duplicate, tool raises, stale owner, large result,
              store outage): each step's answer, the ledger and the stored records
"""

import argparse
import glob
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from importlib import metadata

import boto3

SYSTEMS = ("powertools", "powertools_parameters", "toolcall_dedup")
BEHAVIOUR_EVENT = "retry/charge_card.1-key_order-a.json"


class Worker:
    """One system's worker process; requests may overlap, answers are matched by id."""

    def __init__(self, name: str, argv: list[str], env: dict, ledger: str, table: str):
        self.name, self.ledger, self.table = name, ledger, table
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.answers: dict[int, dict] = {}
        self.cond = threading.Condition()
        self.next_id = 0
        ready = queue.Queue()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        try:
            ready.get(timeout=300)
        except queue.Empty:
            raise SystemExit(f"{name}: worker did not start")

    def _read(self, ready: queue.Queue) -> None:
        for line in self.proc.stdout:
            answer = json.loads(line)
            if answer.get("ready"):
                ready.put(True)
                continue
            with self.cond:
                self.answers[answer["id"]] = answer
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def send(self, event: dict, fault: dict | None = None, remaining_ms: int = 60_000) -> int:
        self.next_id += 1
        request = {"id": self.next_id, "event": event, "remaining_ms": remaining_ms, "fault": fault or {}}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.next_id

    def wait(self, request_id: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while request_id not in self.answers:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{self.name}: no answer to request {request_id}")
                self.cond.wait(timeout=1)
            return self.answers.pop(request_id)

    def invoke(self, event: dict, **kw) -> dict:
        started = time.monotonic()
        answer = self.wait(self.send(event, **kw))
        answer["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return answer

    def executions(self) -> int:
        try:
            with open(self.ledger) as f:
                return sum(1 for line in f if line.strip())
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Run:
    def __init__(self, args):
        self.args = args
        self.out = open(args.out, "w")
        self.ddb = boto3.client("dynamodb", endpoint_url=args.moto)  # direct: not counted

    def record(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, sort_keys=True) + "\n")
        self.out.flush()

    def counts(self) -> dict:
        with urllib.request.urlopen(f"{self.args.proxy}/__peer/counts") as r:
            return json.load(r)

    def outage(self, on: bool) -> None:
        req = urllib.request.Request(f"{self.args.proxy}/__peer/outage?on={int(on)}", method="POST")
        urllib.request.urlopen(req).read()

    def requests_during(self, action) -> tuple:
        before = self.counts()
        result = action()
        after = self.counts()
        delta = {op: after[op] - before.get(op, 0) for op in after if after[op] != before.get(op, 0)}
        return result, delta

    def create_table(self, name: str, key: str, ttl: str) -> None:
        self.ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                              AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                              KeySchema=[{"AttributeName": key, "KeyType": "HASH"}])
        self.ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})

    def items(self, table: str) -> list[dict]:
        items = self.ddb.scan(TableName=table, ConsistentRead=True)["Items"]
        return [{k: next(iter(v.values())) for k, v in item.items()} for item in items]

    def reset(self, worker: Worker) -> None:
        keys = [k["AttributeName"] for k in self.ddb.describe_table(TableName=worker.table)["Table"]["KeySchema"]]
        for item in self.ddb.scan(TableName=worker.table, ConsistentRead=True)["Items"]:
            self.ddb.delete_item(TableName=worker.table, Key={k: item[k] for k in keys})

    def record_states(self, worker: Worker) -> list[str]:
        return sorted(str(item.get("status")) for item in self.items(worker.table))


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def worker_specs(args, run: Run) -> dict:
    """Per system: (argv, env, ledger, table), with Powertools' tables created."""
    env = dict(os.environ, AWS_ENDPOINT_URL_DYNAMODB=args.proxy, AWS_LAMBDA_FUNCTION_NAME="peer-powertools")
    specs = {}
    for name, key in (("powertools", None), ("powertools_parameters", "parameters")):
        table = f"peer-{name.replace('_', '-')}"
        run.create_table(table, "id", "expiration")
        ledger = os.path.join(args.workdir, f"{name}.ledger.jsonl")
        argv = [sys.executable, os.path.join(os.path.dirname(__file__), "powertools_worker.py"),
                "--table", table, "--ledger", ledger, "--policy", args.policy]
        if key:
            argv += ["--event-key", key]
        specs[name] = (argv, env, ledger, table)
    ledger = os.path.join(args.workdir, "toolcall_dedup.ledger.jsonl")
    ours_env = dict(env, DEDUP_STORE="dynamodb", DEDUP_DYNAMODB_ENDPOINT=args.proxy, DEDUP_TABLE_NAME="peer-toolcall-dedup",
                    DEDUP_POLICY_FILE=args.policy, DEMO_LEDGER=ledger)
    run.create_table("peer-toolcall-dedup", "pk", "expires_at")  # `dedup table create`'s layout
    specs["toolcall_dedup"] = ([args.driver], ours_env, ledger, "peer-toolcall-dedup")
    return specs


def start_workers(specs: dict) -> dict:
    workers = {name: Worker(name, *spec) for name, spec in specs.items()}
    for worker in workers.values():
        if os.path.exists(worker.ledger):
            os.remove(worker.ledger)
    return workers


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set so far (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def measure_cold_start(run: Run, specs: dict, event: dict, times: int) -> None:
    """Each system's process started fresh `times` times: from the start to its first answer (a
    first sight on a clean table), and its peak RSS then. Python pays for the interpreter and its
    imports (the resolver, the idempotency utility, boto3); ours for the binary's start, its
    configuration and its clients. Both tables exist already, as in a deployed stack."""
    for i in range(times):
        for name in rotated(i):
            if name == "powertools_parameters":
                continue  # the same process as `powertools`
            argv, env, ledger, table = specs[name]
            started = time.monotonic()
            worker = Worker(name, argv, env, ledger, table)
            answer = worker.invoke(event)
            first_answer_ms = round((time.monotonic() - started) * 1000, 1)
            rss = peak_rss_mb(worker.proc.pid)
            worker.close()
            run.reset(worker)
            run.record({"kind": "cold_start", "system": name, "first_answer_ms": first_answer_ms,
                        "rss_mb": rss, "outcome": answer.get("outcome"), "error": answer.get("error")})


def rotated(i: int) -> list[str]:
    """System order for the i-th event: rotated, so no system always runs first or last."""
    k = i % len(SYSTEMS)
    return list(SYSTEMS[k:] + SYSTEMS[:k])


def corpus_pairs(events_dir: str) -> list[tuple[str, str, str]]:
    pairs = []
    for klass in ("retry", "deliberate_repeat"):
        for a in sorted(glob.glob(os.path.join(events_dir, klass, "*-a.json"))):
            pairs.append((klass, a, a[: -len("-a.json")] + "-b.json"))
    return pairs


def measure_pairs(run: Run, workers: dict, pairs) -> None:
    for i, (klass, a, b) in enumerate(pairs):
        event_a, event_b = load(a), load(b)
        for name in rotated(i):
            worker = workers[name]
            run.reset(worker)
            before = worker.executions()
            answers = [worker.invoke(event_a), worker.invoke(event_b)]
            run.record({"kind": "pair", "system": name, "class": klass,
                        "pair": os.path.basename(a)[: -len("-a.json")],
                        "executions": worker.executions() - before,
                        "answers": [x.get("outcome") for x in answers],
                        "errors": [x["error"] for x in answers if x.get("error")]})


def measure_timing(run: Run, workers: dict, pairs, warmup: int) -> None:
    events = [(os.path.basename(a), load(a)) for _, a, _ in pairs]
    for name in SYSTEMS:  # warm: imports, connections, caches
        worker = workers[name]
        run.reset(worker)
        for _, event in events[:warmup]:
            worker.invoke(event)
            worker.invoke(event)
    for i, (file, event) in enumerate(events):
        for name in rotated(i):
            worker = workers[name]
            run.reset(worker)
            for phase in ("first_sight", "repeat"):
                before = worker.executions()
                answer, requests = run.requests_during(lambda: worker.invoke(event))
                run.record({"kind": "timing", "system": name, "event": file, "phase": phase,
                            **{k: round(answer[k], 1) for k in ("handler_us", "tool_us", "handler_cpu_us", "tool_cpu_us")},
                            "requests": requests, "executed": worker.executions() - before,
                            "outcome": answer.get("outcome"), "error": answer.get("error")})


def step(worker: Worker, answer: dict, before: int, run: Run | None = None) -> dict:
    out = {k: answer.get(k) for k in ("outcome", "state", "receipt", "error", "elapsed_ms")}
    out["body_head"] = (answer.get("body_head") or "")[:160]
    out["executions"] = worker.executions() - before
    if run is not None:
        out["records"] = run.record_states(worker)
    return out


# Per system, for the stale-owner scenario: A's remaining time, how long its tool takes, and when
# B arrives: just after A's lease ended. Powertools' lease is the Lambda's remaining time;
# toolcall-dedup's is the remaining time plus 5 s (handler::Settings::lease_margin).
TAKEOVER = {
    "powertools": {"remaining_ms": 300, "delay_ms": 1500, "b_after_ms": 600},
    "powertools_parameters": {"remaining_ms": 300, "delay_ms": 1500, "b_after_ms": 600},
    "toolcall_dedup": {"remaining_ms": 2000, "delay_ms": 8000, "b_after_ms": 7500},
}
LARGE_RESULT_BYTES = 600_000


def during_outage(run: Run, worker: Worker, event: dict) -> tuple:
    """One invocation while every DynamoDB request fails with 500: its answer and the requests sent."""
    run.outage(True)
    try:
        return run.requests_during(lambda: worker.invoke(event))
    finally:
        run.outage(False)


def behaviours(run: Run, workers: dict, event: dict) -> None:
    for name in SYSTEMS:
        worker = workers[name]

        def scenario(title: str, steps: list[dict], **extra) -> None:
            run.record({"kind": "behaviour", "system": name, "scenario": title, "steps": steps, **extra})

        # In-progress duplicate: B arrives while A's tool (1.5 s) is still running.
        run.reset(worker)
        before = worker.executions()
        a = worker.send(event, fault={"delay_ms": 1500})
        time.sleep(0.3)
        b = worker.invoke(event)
        a = worker.wait(a)
        scenario("in_progress", [step(worker, a, before), step(worker, b, before)])

        # The tool raises after its side effect; then a plain retry.
        faults = [("raise", {"raise": True})]
        if name != "toolcall_dedup":
            faults.append(("raise_escape", {"raise_escape": True}))
        for title, fault in faults:
            run.reset(worker)
            before = worker.executions()
            a = step(worker, worker.invoke(event, fault=fault), before, run)
            b = step(worker, worker.invoke(event), before, run)
            scenario(title, [a, b])

        # Stale owner: A outlives its lease, B takes the key over and completes, then A finishes; C reads.
        t = TAKEOVER[name]
        run.reset(worker)
        before = worker.executions()
        a = worker.send(event, fault={"delay_ms": t["delay_ms"]}, remaining_ms=t["remaining_ms"])
        time.sleep(t["b_after_ms"] / 1000)
        b = step(worker, worker.invoke(event), before, run)
        a = step(worker, worker.wait(a), before, run)
        c = step(worker, worker.invoke(event), before, run)
        scenario("takeover", [a, b, c], timing=t)

        # A result over DynamoDB's 400 KB item limit, then a retry.
        run.reset(worker)
        before = worker.executions()
        a = step(worker, worker.invoke(event, fault={"result_bytes": LARGE_RESULT_BYTES}), before, run)
        b = step(worker, worker.invoke(event), before, run)
        scenario("large_result", [a, b], result_bytes=LARGE_RESULT_BYTES)

        # Store outage: every DynamoDB request fails with 500 until the call has been answered.
        run.reset(worker)
        before = worker.executions()
        answer, requests = during_outage(run, worker, event)
        scenario("outage", [step(worker, answer, before)], requests=requests)


# A container's breaker (toolcall-dedup) fails later claims at once for 2 s after an outage; each
# interleaved outage run waits longer than that, so every run measures a first encounter.
BREAKER_OPEN_S = 2.0
OUTAGE_SYSTEMS = ("powertools", "toolcall_dedup")


def outages(run: Run, workers: dict, event: dict, runs: int) -> None:
    """The store outage, `runs` times per system, interleaved (the order alternates per round) so
    that load on the machine falls on both alike; summary.py reports the median and keeps each run."""
    for i in range(runs):
        order = OUTAGE_SYSTEMS if i % 2 == 0 else tuple(reversed(OUTAGE_SYSTEMS))
        for name in order:
            worker = workers[name]
            run.reset(worker)
            time.sleep(BREAKER_OPEN_S + 0.5)
            before = worker.executions()
            answer, requests = during_outage(run, worker, event)
            run.record({"kind": "outage", "system": name, "run": i, "fail_closed_ms": answer.get("elapsed_ms"),
                        "requests": sum(requests.values()), "executions": worker.executions() - before,
                        "outcome": answer.get("outcome"), "error": answer.get("error")})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--moto", required=True)
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--driver", required=True, help="toolcall-dedup's peer driver binary")
    parser.add_argument("--events", required=True, help="events/corpus")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--cold-starts", type=int, default=10, help="fresh processes per system")
    parser.add_argument("--build", default="", help="how the driver was built (recorded)")
    parser.add_argument("--skip-behaviours", action="store_true")
    parser.add_argument("--outage-runs", type=int, default=5, help="interleaved store-outage runs per system")
    args = parser.parse_args()

    run = Run(args)
    pairs = corpus_pairs(args.events)
    if not pairs:
        raise SystemExit(f"no corpus pairs under {args.events}")
    run.record({"kind": "meta", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                "aws_lambda_powertools": metadata.version("aws-lambda-powertools"),
                "boto3": metadata.version("boto3"), "moto": metadata.version("moto"), "driver_build": args.build,
                "pairs": len(pairs), "takeover": TAKEOVER, "large_result_bytes": LARGE_RESULT_BYTES})
    specs = worker_specs(args, run)
    print("peer-powertools: cold starts", file=sys.stderr)
    measure_cold_start(run, specs, load(os.path.join(args.events, BEHAVIOUR_EVENT)), args.cold_starts)
    workers = start_workers(specs)
    try:
        print("peer-powertools: corpus pairs", file=sys.stderr)
        measure_pairs(run, workers, pairs)
        print("peer-powertools: timing and requests", file=sys.stderr)
        measure_timing(run, workers, pairs, args.warmup)
        if not args.skip_behaviours:
            print("peer-powertools: behaviours", file=sys.stderr)
            behaviours(run, workers, load(os.path.join(args.events, BEHAVIOUR_EVENT)))
        if args.outage_runs:
            print(f"peer-powertools: {args.outage_runs} interleaved outage runs", file=sys.stderr)
            outages(run, workers, load(os.path.join(args.events, BEHAVIOUR_EVENT)), args.outage_runs)
    finally:
        for worker in workers.values():
            worker.close()
        run.out.close()


if __name__ == "__main__":
    main()
