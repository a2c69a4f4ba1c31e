"""Powertools' side of `scripts/peer-powertools`: a Bedrock action-group Lambda handler with
Powertools' `BedrockAgentFunctionResolver` and `@idempotent` (`DynamoDBPersistenceLayer`, default
settings), whose tools append to a ledger file. It speaks the same JSON-lines protocol as
`examples/peer_driver.rs` (toolcall-dedup's side), so the orchestrator drives both alike.

Usage: python powertools_worker.py --table T --ledger FILE --policy events/corpus/policy.json
       [--event-key JMESPATH]   (default: none, i.e. Powertools' default, the whole event)
The DynamoDB endpoint comes from AWS_ENDPOINT_URL_DYNAMODB (boto3's own setting), so the
persistence layer is built exactly as in a deployed function: `DynamoDBPersistenceLayer(table_name=T)`.

Request:  {"id": 1, "event": {...}, "remaining_ms": 60000,
           "fault": {"delay_ms": 0, "raise": false, "raise_escape": false, "result_bytes": 0}}
Answer:   {"id": 1, "outcome": "answered"|"error", "state", "receipt", "body_head", "error",
           "handler_us", "tool_us", "handler_cpu_us", "tool_cpu_us"}

`handler_us` is the whole decorated handler; `tool_us` the time inside it, i.e. in
`app.resolve` (the resolver's parsing, the tool with its ledger append, the reply), which the
orchestrator subtracts; `handler_cpu_us` / `tool_cpu_us` the same spans in process CPU time.
Faults: `delay_ms` sleeps before the side effect; `raise` makes the tool
raise after its side effect (the resolver turns that into an error reply); `raise_escape` makes
the handler raise after the tool ran (a Lambda `FunctionError`); `result_bytes` adds that much
random text to the reply.
"""

import argparse
import inspect
import json
import random
import string
import sys
import threading
import time
import uuid

from aws_lambda_powertools.event_handler import BedrockAgentFunctionResolver
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)

PREFIX = {"charge_card": "ch", "refund": "re", "create_ticket": "tk"}
local = threading.local()
ledger_lock = threading.Lock()
ALPHANUMERIC = string.ascii_letters + string.digits


class LambdaContext:
    """The parts of the Lambda context Powertools reads."""

    def __init__(self, request_id: str, remaining_ms: int):
        self.function_name = "peer-powertools"
        self.memory_limit_in_mb = 128
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:peer-powertools"
        self.aws_request_id = request_id
        self._deadline = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def build(table: str, ledger: str, policy: str, event_key: str | None):
    app = BedrockAgentFunctionResolver()

    def make_tool(name: str, params: list[str]):
        def tool(**arguments):
            fault = local.fault
            if fault.get("delay_ms"):
                time.sleep(fault["delay_ms"] / 1000)
            receipt = {"receipt_id": f"{PREFIX.get(name, 'op')}_{uuid.uuid4().hex}", "status": "succeeded", "tool": name}
            entry = {"ts_ms": int(time.time() * 1000), "receipt_id": receipt["receipt_id"], "tool": name,
                     "session_id": app.current_event.session_id, "arguments": arguments}
            with ledger_lock, open(ledger, "a") as f:
                f.write(json.dumps(entry) + "\n")
            if fault.get("raise"):
                raise RuntimeError("injected: the tool raised after its side effect")
            if fault.get("result_bytes"):
                receipt["padding"] = "".join(random.choices(ALPHANUMERIC, k=fault["result_bytes"]))
            return receipt

        kw = inspect.Parameter.KEYWORD_ONLY
        tool.__signature__ = inspect.Signature([inspect.Parameter(p, kw, default=None) for p in params])
        return tool

    with open(policy) as f:
        tools = json.load(f)["tools"]
    for name, spec in tools.items():
        app.tool(name=name)(make_tool(name, list(spec["schema"].get("properties", {}))))

    persistence = DynamoDBPersistenceLayer(table_name=table)
    config = IdempotencyConfig(event_key_jmespath=event_key) if event_key else IdempotencyConfig()

    @idempotent(config=config, persistence_store=persistence)
    def lambda_handler(event, context):
        started, started_cpu = time.perf_counter_ns(), time.process_time_ns()
        try:
            return app.resolve(event, context)
        finally:
            local.tool_ns += time.perf_counter_ns() - started
            local.tool_cpu_ns += time.process_time_ns() - started_cpu
            if local.fault.get("raise_escape"):
                raise RuntimeError("injected: the handler raised after the tool ran")

    return lambda_handler


def summarize(response) -> tuple:
    function_response = (response or {}).get("response", {}).get("functionResponse", {})
    body = function_response.get("responseBody", {}).get("TEXT", {}).get("body", "")
    try:
        receipt = json.loads(body).get("receipt_id")
    except (ValueError, AttributeError):
        receipt = None
    return receipt, function_response.get("responseState"), body[:300]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--event-key", default=None)
    args = parser.parse_args()
    handler = build(args.table, args.ledger, args.policy, args.event_key)
    out_lock = threading.Lock()

    def answer(obj) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    def invoke(request) -> None:
        local.fault = request.get("fault") or {}
        local.tool_ns = local.tool_cpu_ns = 0
        context = LambdaContext(f"peer-{request['id']}", request.get("remaining_ms") or 60_000)
        result = {"id": request["id"], "outcome": "answered", "state": None, "receipt": None,
                  "body_head": "", "error": None}
        started, started_cpu = time.perf_counter_ns(), time.process_time_ns()
        try:
            response = handler(request["event"], context)
            result["receipt"], result["state"], result["body_head"] = summarize(response)
        except Exception as e:  # the Lambda runtime would report it as a FunctionError
            result["outcome"] = "error"
            result["error"] = f"{type(e).__name__}: {e}"[:300]
        result["handler_us"] = (time.perf_counter_ns() - started) / 1000
        result["handler_cpu_us"] = (time.process_time_ns() - started_cpu) / 1000
        result["tool_us"] = local.tool_ns / 1000
        result["tool_cpu_us"] = local.tool_cpu_ns / 1000
        answer(result)

    answer({"ready": True})
    threads = []
    for line in sys.stdin:
        if line.strip():
            thread = threading.Thread(target=invoke, args=(json.loads(line),))
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
