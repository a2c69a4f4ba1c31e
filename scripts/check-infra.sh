#!/usr/bin/env bash
# Machine checks for the deployable infrastructure (issue 6). Offline-safe:
# needs only the package registries when something must be installed.
#
#   1. cfn-lint infra/template.yaml           must print nothing and exit 0
#   2. sam validate (--lint, via samconfig)    when the SAM CLI is available
#   3. events/**/*.json                        well-formed events of every entry point (and corpus)
#   4. npm ci + tsc + cdk synth (infra/cdk)    without compiling Rust; cdk-nag (AwsSolutions) runs in
#                                              synth, and an unacknowledged finding fails it
#   5. npm test (infra/cdk)                    synth assertions on a sample app using the construct
#   6. cfn-lint on the CDK template            (W3005 ignored: a CDK artifact)
#   7. scripts/compare_stacks.py --self-test   CDK synth vs SAM template
#
# Exit status: 0 when every check passes, 1 otherwise (all checks still run).
#
# Environment:
#   SAM=/path/to/sam           use this SAM CLI (default: `sam` on PATH, else skipped)
#   CHECK_INFRA_INSTALL_SAM=1  pip-install aws-sam-cli into .venv-infra if no SAM CLI
#   CHECK_INFRA_SKIP_NPM_CI=1  reuse infra/cdk/node_modules if present (faster local runs)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-infra"           # gitignored (/.venv*)
export SAM_CLI_TELEMETRY=0 CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"

failures=()
START=$SECONDS
step() { printf '\n== %s\n' "$*"; STEP_START=$SECONDS; }
done_step() { printf -- '-- %s: %s (%ds)\n' "$1" "$2" "$((SECONDS - STEP_START))"; [ "$2" = ok ] || [ "$2" = skipped ] || failures+=("$1"); }

venv_pip() {
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" || return 1
  "$VENV/bin/pip" install -q "$@"
}

# ---------------------------------------------------------------- tools
step "tools"
# A pinned cfn-lint, the first to know the Gateway's ProtocolConfiguration.Mcp.SessionConfiguration
# (an older one on PATH would refuse the template): installed into the venv once.
CFN_LINT_VERSION=1.58.0
if [ "$("$VENV/bin/cfn-lint" --version 2>/dev/null)" != "cfn-lint $CFN_LINT_VERSION" ]; then
  echo "installing cfn-lint $CFN_LINT_VERSION into $VENV"
  # The SAM translator is no longer a dependency of cfn-lint: it expands the SAM template (for
  # cfn-lint's transform and for compare_stacks.py).
  venv_pip "cfn-lint==$CFN_LINT_VERSION" aws-sam-translator || { echo "cannot install cfn-lint"; exit 1; }
fi
export PATH="$VENV/bin:$PATH"
CFN_LINT="$VENV/bin/cfn-lint"
# compare_stacks.py needs the SAM translator, which cfn-lint depends on: use
# the Python that runs cfn-lint.
PY="$(head -1 "$CFN_LINT" | sed -n 's/^#!//p')"
if [ -z "$PY" ] || ! "$PY" -c 'import samtranslator' 2>/dev/null; then PY=python3; fi
if ! "$PY" -c 'import samtranslator' 2>/dev/null; then
  venv_pip aws-sam-translator && PY="$VENV/bin/python"
fi
if [ -n "${SAM:-}" ]; then :
elif command -v sam >/dev/null 2>&1; then SAM="$(command -v sam)"
elif [ -x "$VENV/bin/sam" ]; then SAM="$VENV/bin/sam"
elif [ "${CHECK_INFRA_INSTALL_SAM:-0}" = 1 ]; then
  echo "installing aws-sam-cli into $VENV (about 1 min)"; venv_pip aws-sam-cli && SAM="$VENV/bin/sam"
else SAM=""
fi
echo "cfn-lint: $("$CFN_LINT" --version 2>&1) ($CFN_LINT)"
echo "python:   $("$PY" --version 2>&1), samtranslator $("$PY" -c 'import samtranslator; print(samtranslator.__version__)')"
if [ -n "$SAM" ]; then echo "sam:      $("$SAM" --version 2>&1)"; else echo "sam:      not installed (sam validate skipped)"; fi
echo "node:     $(node --version 2>&1), npm $(npm --version 2>&1)"

# ---------------------------------------------------------------- 1. cfn-lint (SAM)
step "cfn-lint infra/template.yaml"
out="$("$CFN_LINT" infra/template.yaml 2>&1)"; rc=$?
[ -n "$out" ] && echo "$out"
if [ $rc -eq 0 ] && [ -z "$out" ]; then done_step cfn-lint ok; else done_step cfn-lint "FAILED (rc=$rc)"; fi

# ---------------------------------------------------------------- 2. sam validate
step "sam validate --lint"
if [ -n "$SAM" ]; then
  # No arguments: samconfig.toml's [default.validate.parameters] name the template, --lint and the
  # region, so this also proves the SAM CLI reads samconfig.toml.
  if "$SAM" validate; then
    done_step "sam validate" ok; else done_step "sam validate" FAILED; fi
else
  echo "SAM CLI not installed; set CHECK_INFRA_INSTALL_SAM=1 to install it"; done_step "sam validate" skipped
fi

# ---------------------------------------------------------------- 3. events
step "events/**/*.json"
if "$PY" - <<'EOF'
import base64, glob, json, sys
TYPES = {"string", "number", "integer", "boolean", "array"}
bad = 0
# The session id is optional: newer Gateways send none. Either spelling of each name is read
# (the lower-case one is an older AWS tutorial's).
GATEWAY_KEYS = ("bedrockAgentCoreToolName", "bedrockAgentCoreGatewayId", "bedrockAgentCoreTargetId",
                "bedrockAgentCoreMessageVersion")
def either(custom, key):
    # Both spellings the runtime reads; the lower-case one names the gateway its endpoint.
    lower = key.replace("AgentCore", "agentcore", 1)
    return custom.get(key, custom.get(lower, custom.get(lower.replace("GatewayId", "EndpointId"))))
# Every event of every entry point, the generated corpus included. Key policies and AgentCore client
# contexts are not events (a client context is checked with its event).
files = sorted(f for f in glob.glob("events/**/*.json", recursive=True)
               if not f.endswith(("/policy.json", ".client-context.json"))
               and not f.startswith("events/policies/"))
for path in files:
    name = path.split("/")[-1]
    try:
        with open(path, encoding="utf-8") as fh:
            ev = json.load(fh)
    except ValueError as exc:
        print(f"  {path}: not JSON: {exc}"); bad += 1; continue
    errs = []
    if path.startswith("events/agentcore/"):
        # The arguments object; the tool name and ids come in the client context beside it.
        try:
            with open(path[:-len(".json")] + ".client-context.json", encoding="utf-8") as fh:
                custom = json.load(fh).get("custom")
        except (OSError, ValueError, AttributeError) as exc:
            custom = None; errs.append(f"client context: {exc}")
        if not isinstance(custom, dict) or not all(isinstance(either(custom, k), str) for k in GATEWAY_KEYS):
            errs.append("client context needs custom." + "/".join(GATEWAY_KEYS) + " (strings)")
        elif not name.startswith("bad-"):
            if either(custom, "bedrockAgentCoreMessageVersion") != "1.0": errs.append("message version != 1.0")
            if "___" not in either(custom, "bedrockAgentCoreToolName"): errs.append("tool name without <target>___ prefix")
            if not isinstance(ev, dict): errs.append("arguments not an object")
    elif path.startswith("events/agentcore-interceptor/"):
        # The developer guide's "Types of interceptors" shapes: MCP (a JSON-RPC body, or a batch
        # of them) or HTTP (base64 bodies); a version other than 1.0 only in a future-version file.
        version = ev.get("interceptorInputVersion") if isinstance(ev, dict) else None
        mcp, http = (ev.get("mcp"), ev.get("http")) if isinstance(ev, dict) else (None, None)
        if version != "1.0" and not (name.startswith("future-version") and isinstance(version, str)):
            errs.append("interceptorInputVersion != 1.0")
        elif isinstance(http, dict):
            for part in ("gatewayRequest", "gatewayResponse"):
                body = (http.get(part) or {}).get("body")
                if body is not None:
                    try: base64.b64decode(body, validate=True)
                    except (ValueError, TypeError): errs.append(f"http.{part}.body is not base64")
        else:
            body = ((mcp or {}).get("gatewayRequest") or {}).get("body")
            messages = body if isinstance(body, list) else [body]
            if not messages or not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0"
                                       and isinstance(m.get("method"), str) for m in messages):
                errs.append("mcp.gatewayRequest.body needs jsonrpc 2.0 and a method")
            elif any(m["method"] == "tools/call" and "___" not in str((m.get("params") or {}).get("name"))
                     for m in messages):
                errs.append("tools/call name without <target>___ prefix")
            elif name.endswith(".response.json") and not isinstance(mcp.get("gatewayResponse"), dict):
                errs.append("a .response.json needs mcp.gatewayResponse")
    elif path.startswith("events/envelope/"):
        if not name.startswith("bad-"):
            if not isinstance(ev, dict) or not isinstance(ev.get("tool"), str): errs.append("needs a tool")
            elif ("input" in ev) == ("args" in ev): errs.append("needs exactly one of input / args")
            elif "input" in ev and not isinstance(ev["input"], dict): errs.append("input not an object")
            elif "args" in ev and not isinstance(json.loads(ev["args"]), dict): errs.append("args not object text")
            # run_id, or the caller's own key (default member name idempotency_key): a non-blank string.
            elif not ev.get("run_id") and not (isinstance(ev.get("idempotency_key"), str)
                                               and ev["idempotency_key"].strip()):
                errs.append("needs a run_id or the caller's idempotency_key")
    elif name.startswith("bad-"):
        pass  # malformed on purpose; only has to be JSON
    elif not isinstance(ev, dict):
        errs.append("not an object")
    else:
        if ev.get("messageVersion") != "1.0": errs.append("messageVersion != 1.0")
        for k in ("sessionId", "actionGroup", "inputText"):
            if not isinstance(ev.get(k), str) or not ev.get(k): errs.append(f"missing {k}")
        if not all(isinstance(ev.get("agent", {}).get(k), str) for k in ("name", "id", "alias", "version")):
            errs.append("agent needs name, id, alias, version")
        if bool(ev.get("function")) == bool(ev.get("apiPath")):
            errs.append("needs exactly one of function / apiPath")
        if ev.get("apiPath") and not ev.get("httpMethod"): errs.append("apiPath without httpMethod")
        props = list(ev.get("parameters") or [])
        for c in (ev.get("requestBody") or {}).get("content", {}).values():
            props += c.get("properties", [])
        for p in props:
            if not isinstance(p.get("value"), str): errs.append(f"{p.get('name')}: value not a string")
            if p.get("type") not in TYPES: errs.append(f"{p.get('name')}: type {p.get('type')!r}")
            if p.get("type") == "array":
                try: json.loads(p["value"])
                except ValueError: errs.append(f"{p.get('name')}: array value is not JSON")
        for m in ("sessionAttributes", "promptSessionAttributes"):
            if not all(isinstance(v, str) for v in (ev.get(m) or {}).values()): errs.append(f"{m} values must be strings")
    for e in errs:
        print(f"  {path}: {e}")
    bad += bool(errs)
print(f"  {len(files)} event files, {bad} with problems")
sys.exit(1 if bad or not files else 0)
EOF
then done_step events ok; else done_step events FAILED; fi

# ---------------------------------------------------------------- 4. CDK synth
step "infra/cdk: npm ci, tsc, cdk synth (bundling skipped)"
cdk_ok=1
(
  cd infra/cdk || exit 1
  if [ "${CHECK_INFRA_SKIP_NPM_CI:-0}" = 1 ] && [ -d node_modules ]; then
    echo "reusing node_modules (CHECK_INFRA_SKIP_NPM_CI=1)"
  else
    npm ci --no-audit --no-fund --loglevel=error || exit 1
  fi
  npx --no-install tsc --noEmit || exit 1
  rm -rf cdk.out
  # CDK_SKIP_BUNDLING=1: see bin/app.ts. No cargo/zig/Docker is invoked. bin/app.ts registers
  # cdk-nag as a policy-validation plugin: a finding without an acknowledgement (and its reason)
  # makes synth print it and exit non-zero.
  CDK_SKIP_BUNDLING=1 npx --no-install cdk synth --no-notices -q 2> >(grep -v 'feature flags are not configured' >&2) || exit 1
  test -s cdk.out/ToolcallDedup.template.json
) && done_step "cdk synth" ok || { done_step "cdk synth" FAILED; cdk_ok=0; }

# ---------------------------------------------------------------- 5. CDK assertions
step "infra/cdk: synth assertions (npm test)"
# test/*.test.ts: a sample app importing the ToolcallDedup construct (grants, config source, alarm
# notification, mode, cdk-nag), through Node's own test runner; bundling skipped, no Rust built.
if [ -d infra/cdk/node_modules ] && (cd infra/cdk && npm test --silent); then
  done_step "cdk assertions" ok; else done_step "cdk assertions" FAILED; fi

# ---------------------------------------------------------------- 6. cfn-lint (CDK)
step "cfn-lint on the CDK template"
if [ $cdk_ok = 1 ]; then
  # W3005: CDK's Function adds DependsOn on its role although Role: GetAtt already implies it.
  out="$("$CFN_LINT" --ignore-checks W3005 -- infra/cdk/cdk.out/ToolcallDedup.template.json 2>&1)"; rc=$?
  [ -n "$out" ] && echo "$out"
  if [ $rc -eq 0 ] && [ -z "$out" ]; then done_step "cfn-lint cdk" ok; else done_step "cfn-lint cdk" "FAILED (rc=$rc)"; fi
else
  echo "no synth output"; done_step "cfn-lint cdk" FAILED
fi

# ---------------------------------------------------------------- 7. compare
step "compare CDK synth with the SAM template"
if [ $cdk_ok = 1 ] && "$PY" scripts/compare_stacks.py --quiet --self-test \
     --sam infra/template.yaml --cdk infra/cdk/cdk.out/ToolcallDedup.template.json; then
  done_step compare ok
else
  done_step compare FAILED
fi

# ---------------------------------------------------------------- summary
printf '\n== check-infra: %ds total\n' "$((SECONDS - START))"
if [ ${#failures[@]} -eq 0 ]; then
  echo "check-infra: all checks passed"
else
  printf 'check-infra: FAILED: %s\n' "${failures[*]}"
  exit 1
fi
