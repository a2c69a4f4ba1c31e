#!/usr/bin/env python3
"""Compare the SAM template (infra/template.yaml) with the CDK synth output.

The SAM template is first expanded with the SAM translator (the same library
cfn-lint uses, so no SAM CLI and no AWS credentials are needed). Both
CloudFormation templates are then *evaluated* under a few parameter scenarios
(defaults, and "everything switched on"): Ref/Fn::Sub/Fn::Join/Fn::If/
Fn::Select/Fn::Split and conditions are resolved, pseudo parameters get fixed
fake values, and resources whose Condition is false are dropped. On the
evaluated templates it checks:

  * the console parameter groups (Metadata AWS::CloudFormation::Interface),
    every parameter in exactly one;
  * the idempotency table: key schema, attribute definitions, TTL attribute,
    billing mode, SSE, PITR, deletion/replace policies;
  * the results bucket (only when CreateResultsBucket): all its properties and
    deletion/replace policies, and its TLS-only bucket policy; the contract
    SSE-S3, public access blocked, bucket owner enforced, one lifecycle rule
    expiring results/ after 32 days, retained;
  * every Lambda function: runtime, architectures, handler, memory, timeout,
    environment, logging config;
  * IAM: for every role, the (effect, action, resource) triples of all its
    inline and attached policies, its managed policy ARNs and trust policy;
    plus least-privilege assertions on the dedup role (exactly the 4 item
    actions on the table ARN, InvokeFunction and GetFunctionConfiguration on
    the demo tool and on functions tagged toolcall-dedup:tool=true only,
    ssm:GetParameter on the config document only, exactly
    s3:GetObject/PutObject on the bucket's results/* when CreateResultsBucket
    and no s3 action otherwise); DEDUP_RESULTS_BUCKET is the bucket or "",
    DEDUP_CONFIG names the document's parameter;
  * the stack's own config document (no ConfigParameterName) routes every
    tool to the demo tool and states its Timeout;
  * alarms, dashboard, tracing, the live alias and its deployment group;
  * Lambda permissions (principal, source account/ARN: Bedrock agents, one
    AgentCore Gateway), the Bedrock agent's action groups, parameters, the set
    of resources and outputs.

It also asserts the fixed contract (pk/S HASH key, expires_at TTL,
provided.al2023 + arm64) so both stacks cannot drift together.

Exit status: 0 = match, 1 = mismatch, 2 = usage/environment error.
`--self-test` mutates the CDK template in memory and checks that every
mutation is reported (proves the comparison is not vacuous).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from typing import Any

NO_VALUE = object()

PSEUDO = {
    "AWS::Region": "us-east-1",
    "AWS::Partition": "aws",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "toolcall-dedup",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/toolcall-dedup/guid",
    "AWS::NotificationARNs": [],
}

# Parameter scenarios evaluated on both templates.
SCENARIOS: dict[str, dict[str, str]] = {
    "defaults": {},
    "all-on": {
        "CreateDemoAgent": "true",
        "CreateInterceptorGateway": "true",
        "AgentArn": "arn:aws:bedrock:us-east-1:210987654321:agent/AGENT12345",
        "AgentCoreGatewayArn": "arn:aws:bedrock-agentcore:us-east-1:210987654321:gateway/demo-gateway-k3x9q2",
        "Mode": "shadow",
        "EnvelopeNamespaces": "payments,support",
        "AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:dedup-oncall",
        "ReservedConcurrency": "50",
        "ConfigParameterName": "/ops/toolcall-dedup/config",
    },
    # No results bucket: no bucket, no s3 permission, DEDUP_RESULTS_BUCKET "".
    "no-results-bucket": {
        "CreateResultsBucket": "false",
    },
    # The config document in S3 (issue 53): DEDUP_CONFIG is the URI, the role reads that object.
    "config-in-s3": {
        "CreateResultsBucket": "false",
        "ConfigDocumentUri": "s3://ops-config-bucket/toolcall-dedup/config.yaml",
    },
}
# The object the role may read in the config-in-s3 scenario.
CONFIG_OBJECT = "arn:aws:s3:::ops-config-bucket/toolcall-dedup/config.yaml"

# Resources/parameters that only exist because of the tool that generated them.
IGNORED_PARAMETERS = {"BootstrapVersion"}
IGNORED_RESOURCE_TYPES = {"AWS::CDK::Metadata"}

DEDUP_ITEM_ACTIONS = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
# Fixed in both stacks (the config document holds the behaviour).
RESULTS_RETENTION_DAYS = "32"
# Tools the executor may invoke: tagged so, in this account and region (ABAC).
TAGGED_TOOLS = "arn:aws:lambda:us-east-1:123456789012:function:*"
TOOL_TAG_CONDITION = json.dumps({"StringEquals": {"aws:ResourceTag/toolcall-dedup:tool": "true"}}, sort_keys=True)
TOOL_ACTIONS = {"lambda:InvokeFunction", "lambda:GetFunctionConfiguration"}
RESULT_OBJECT_ACTIONS = {"s3:GetObject", "s3:PutObject"}
# How the dedup role names the result objects (the evaluator renders it, e.g. "<GetAtt:ResultsBucket.Arn>/results/*").
RESULT_OBJECTS = {"Fn::Sub": "${ResultsBucket.Arn}/results/*"}


# --------------------------------------------------------------------------- loading
def load_sam(path: str) -> dict:
    os.environ.setdefault("AWS_DEFAULT_REGION", PSEUDO["AWS::Region"])
    try:
        from samtranslator.parser.parser import Parser
        from samtranslator.translator.translator import Translator
        from samtranslator.yaml_helper import yaml_parse
    except ImportError as exc:  # cfn-lint depends on aws-sam-translator
        sys.exit(f"compare_stacks: aws-sam-translator not importable ({exc}); pip install cfn-lint")
    with open(path, encoding="utf-8") as fh:
        tpl = yaml_parse(fh.read())
    # Local CodeUri paths cannot be translated without packaging; like cfn-lint,
    # swap them for a dummy S3 location (code location is not compared).
    glob_fn = tpl.get("Globals", {}).get("Function", {})
    if isinstance(glob_fn.get("CodeUri"), str) and not glob_fn["CodeUri"].startswith("s3://"):
        glob_fn["CodeUri"] = "s3://bucket/key"
    for res in tpl.get("Resources", {}).values():
        props = res.get("Properties") or {}
        if res.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str) \
                and not props["CodeUri"].startswith("s3://"):
            props["CodeUri"] = "s3://bucket/key"
    return Translator(managed_policy_map={}, sam_parser=Parser()).translate(sam_template=tpl, parameter_values={})


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------- evaluation
class Evaluator:
    def __init__(self, tpl: dict, overrides: dict[str, str]):
        self.tpl = tpl
        self.params: dict[str, Any] = {}
        for name, spec in tpl.get("Parameters", {}).items():
            if name in overrides:
                val: Any = overrides[name]
            elif "Default" in spec:
                val = spec["Default"]
            else:
                raise ValueError(f"parameter {name} has no default and no scenario value")
            val = str(val) if not isinstance(val, list) else val
            if spec.get("Type") == "CommaDelimitedList" and isinstance(val, str):
                val = val.split(",")
            self.params[name] = val
        unknown = set(overrides) - set(tpl.get("Parameters", {}))
        if unknown:
            raise ValueError(f"scenario sets unknown parameters {sorted(unknown)}")
        self._conds: dict[str, bool] = {}

    def cond(self, name: str) -> bool:
        if name not in self._conds:
            self._conds[name] = bool(self.ev(self.tpl["Conditions"][name]))
        return self._conds[name]

    def ref(self, name: str) -> Any:
        if name in self.params:
            return self.params[name]
        if name in PSEUDO:
            return PSEUDO[name]
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.tpl.get("Resources", {}):
            return f"<Ref:{name}>"
        raise KeyError(f"Ref to unknown name {name}")

    def sub(self, text: str, extra: dict[str, Any]) -> str:
        def repl(m: re.Match) -> str:
            key = m.group(1)
            if key.startswith("!"):
                return "${" + key[1:] + "}"
            if key in extra:
                return str(extra[key])
            if "." in key and key.split(".", 1)[0] in self.tpl.get("Resources", {}):
                rid, attr = key.split(".", 1)
                return f"<GetAtt:{rid}.{attr}>"
            return str(self.ref(key))
        return re.sub(r"\$\{([^}]+)\}", repl, text)

    def ev(self, node: Any) -> Any:
        if isinstance(node, list):
            out = [self.ev(x) for x in node]
            return [x for x in out if x is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                rid, attr = (arg.split(".", 1) if isinstance(arg, str) else arg)
                return f"<GetAtt:{rid}.{attr}>"
            if key == "Fn::Sub":
                if isinstance(arg, str):
                    return self.sub(arg, {})
                text, variables = arg
                return self.sub(text, {k: self.ev(v) for k, v in variables.items()})
            if key == "Fn::Join":
                sep, items = arg
                items = self.ev(items)
                return sep.join(str(x) for x in items)
            if key == "Fn::Select":
                idx, items = arg
                return self.ev(items)[int(self.ev(idx))]
            if key == "Fn::Split":
                sep, text = arg
                return str(self.ev(text)).split(sep)
            if key == "Fn::If":
                cname, yes, no = arg
                return self.ev(yes if self.cond(cname) else no)
            if key == "Fn::Equals":
                a, b = (self.ev(x) for x in arg)
                return str(a) == str(b)
            if key == "Fn::Not":
                return not self.ev(arg[0])
            if key == "Fn::And":
                return all(self.ev(x) for x in arg)
            if key == "Fn::Or":
                return any(self.ev(x) for x in arg)
            if key == "Condition":
                return self.cond(arg)
            if key.startswith("Fn::"):
                raise NotImplementedError(f"intrinsic {key} not supported by compare_stacks.py")
        out = {}
        for k, v in node.items():
            ev = self.ev(v)
            if ev is not NO_VALUE:
                out[k] = ev
        return out

    def resources(self) -> dict[str, dict]:
        out = {}
        for rid, res in self.tpl.get("Resources", {}).items():
            if res.get("Type") in IGNORED_RESOURCE_TYPES:
                continue
            if "Condition" in res and not self.cond(res["Condition"]):
                continue
            ev = {"Type": res["Type"], "Properties": self.ev(res.get("Properties", {}))}
            for attr in ("DeletionPolicy", "UpdateReplacePolicy"):
                if attr in res:
                    ev[attr] = res[attr]
            if "UpdatePolicy" in res:
                ev["UpdatePolicy"] = self.ev(res["UpdatePolicy"])
            out[rid] = ev
        return normalize_versions(out)

    def outputs(self) -> dict[str, Any]:
        out = {}
        for name, o in self.tpl.get("Outputs", {}).items():
            if "Condition" in o and not self.cond(o["Condition"]):
                continue
            out[name] = self.ev(o["Value"])
        return out


# --------------------------------------------------------------------------- helpers
def normalize_versions(res: dict[str, dict]) -> dict[str, dict]:
    """A function version's logical id carries a hash of the code (SAM) or of the function's
    template (CDK): name each `<Function>Version`, and every reference to it likewise."""
    renames = {}
    for rid, r in res.items():
        if r["Type"] == "AWS::Lambda::Version":
            m = re.fullmatch(r"<Ref:(\w+)>", str(r["Properties"].get("FunctionName")))
            if m:
                renames[rid] = f"{m.group(1)}Version"
    if not renames:
        return res
    text = json.dumps(res)
    for old, new in renames.items():
        text = text.replace(f"<GetAtt:{old}.", f"<GetAtt:{new}.").replace(f"<Ref:{old}>", f"<Ref:{new}>")
    return {renames.get(k, k): v for k, v in json.loads(text).items()}


def as_list(x: Any) -> list:
    return x if isinstance(x, list) else [x]


def iam_triples(doc: dict) -> set[tuple]:
    out = set()
    for st in as_list(doc.get("Statement", [])):
        for action in as_list(st.get("Action", [])):
            for resource in as_list(st.get("Resource", ["*"])):
                out.add((st.get("Effect", "Allow"), action, resource, json.dumps(st.get("Condition"), sort_keys=True)))
    return out


def role_permissions(res: dict[str, dict], role_id: str) -> dict:
    role = res[role_id]["Properties"]
    triples = set()
    for pol in role.get("Policies", []):
        triples |= iam_triples(pol["PolicyDocument"])
    for rid, r in res.items():  # attached AWS::IAM::Policy / ManagedPolicy resources
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and \
                f"<Ref:{role_id}>" in as_list(r["Properties"].get("Roles", [])):
            triples |= iam_triples(r["Properties"]["PolicyDocument"])
    trust = set()
    for st in as_list(role.get("AssumeRolePolicyDocument", {}).get("Statement", [])):
        for action in as_list(st.get("Action")):
            for svc in as_list(st.get("Principal", {}).get("Service", [])):
                trust.add((st.get("Effect"), action, svc, json.dumps(st.get("Condition"), sort_keys=True)))
    return {
        "statements": sorted(triples),
        "managed": sorted(as_list(role.get("ManagedPolicyArns", []))),
        "trust": sorted(trust),
    }


def norm_params(tpl: dict) -> dict:
    out = {}
    for name, spec in tpl.get("Parameters", {}).items():
        if name in IGNORED_PARAMETERS:
            continue
        out[name] = {
            "Type": spec.get("Type"),
            "Default": None if "Default" not in spec else str(spec["Default"]),
            "AllowedValues": None if "AllowedValues" not in spec else [str(v) for v in spec["AllowedValues"]],
            "AllowedPattern": spec.get("AllowedPattern"),
            "MinValue": None if "MinValue" not in spec else str(spec["MinValue"]),
            "MaxValue": None if "MaxValue" not in spec else str(spec["MaxValue"]),
        }
    return out


def parameter_groups(tpl: dict) -> list:
    iface = (tpl.get("Metadata") or {}).get("AWS::CloudFormation::Interface") or {}
    return [(g.get("Label", {}).get("default"), list(g.get("Parameters", []))) for g in iface.get("ParameterGroups", [])]


def function_view(res: dict[str, dict], fid: str) -> dict:
    p = res[fid]["Properties"]
    return {k: p.get(k) for k in ("Runtime", "Architectures", "Handler", "MemorySize", "Timeout",
                                  "Environment", "LoggingConfig", "Description", "TracingConfig",
                                  "ReservedConcurrentExecutions")}


def normalize_numbers(x: Any) -> Any:
    """CloudFormation passes numbers and strings interchangeably; compare as text."""
    if isinstance(x, dict):
        return {k: normalize_numbers(v) for k, v in x.items()}
    if isinstance(x, list):
        return [normalize_numbers(v) for v in x]
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, float)):
        return str(x)
    return x


# --------------------------------------------------------------------------- comparison
class Report:
    def __init__(self, quiet: bool = False):
        self.failures: list[str] = []
        self.passes = 0
        self.quiet = quiet

    def same(self, what: str, sam: Any, cdk: Any) -> None:
        a, b = normalize_numbers(sam), normalize_numbers(cdk)
        if a == b:
            self.passes += 1
            if not self.quiet:
                print(f"  ok   {what}")
        else:
            self.fail(f"{what}\n         sam: {json.dumps(a, sort_keys=True)}\n         cdk: {json.dumps(b, sort_keys=True)}")

    def expect(self, what: str, ok: bool, detail: str = "") -> None:
        if ok:
            self.passes += 1
            if not self.quiet:
                print(f"  ok   {what}")
        else:
            self.fail(f"{what} {detail}".rstrip())

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        if not self.quiet:
            print(f"  FAIL {msg}")


def compare(sam_tpl: dict, cdk_tpl: dict, rep: Report) -> None:
    rep.same("parameters (names, types, defaults, allowed values)", norm_params(sam_tpl), norm_params(cdk_tpl))
    rep.same("condition names", sorted(sam_tpl.get("Conditions", {})), sorted(cdk_tpl.get("Conditions", {})))
    groups = parameter_groups(sam_tpl)
    rep.same("parameter groups (Metadata AWS::CloudFormation::Interface)", groups, parameter_groups(cdk_tpl))
    grouped = [n for _, names in groups for n in names]
    declared = set(sam_tpl.get("Parameters", {})) - IGNORED_PARAMETERS
    rep.expect("every parameter in exactly one parameter group",
               sorted(grouped) == sorted(declared),
               f"ungrouped {sorted(declared - set(grouped))}, unknown {sorted(set(grouped) - declared)}, "
               f"repeated {sorted({n for n in grouped if grouped.count(n) > 1})}")

    for scen, overrides in SCENARIOS.items():
        if not rep.quiet:
            print(f"scenario {scen}: {json.dumps(overrides, sort_keys=True)}")
        s_ev, c_ev = Evaluator(sam_tpl, overrides), Evaluator(cdk_tpl, overrides)
        s, c = s_ev.resources(), c_ev.resources()
        rep.same(f"[{scen}] resources (logical id -> type)",
                 {k: v["Type"] for k, v in s.items()}, {k: v["Type"] for k, v in c.items()})

        # ---- table
        for tid in sorted(k for k, v in s.items() if v["Type"] == "AWS::DynamoDB::Table"):
            if tid not in c:
                continue
            sp, cp = s[tid]["Properties"], c[tid]["Properties"]
            for prop in ("KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes", "TimeToLiveSpecification",
                         "BillingMode", "SSESpecification", "PointInTimeRecoverySpecification"):
                rep.same(f"[{scen}] {tid}.{prop}", sp.get(prop), cp.get(prop))
            for pol in ("DeletionPolicy", "UpdateReplacePolicy"):
                rep.same(f"[{scen}] {tid} {pol}", s[tid].get(pol), c[tid].get(pol))
            if scen == "defaults":
                rep.expect(f"[{scen}] {tid} key schema is pk (S) HASH only",
                           sp.get("KeySchema") == [{"AttributeName": "pk", "KeyType": "HASH"}]
                           and sp.get("AttributeDefinitions", [None])[0] == {"AttributeName": "pk", "AttributeType": "S"},
                           json.dumps(sp.get("KeySchema")))
                gsi = sp.get("GlobalSecondaryIndexes", [])
                rep.expect(f"[{scen}] {tid} has the sparse attention index (attention S HASH, created_at N RANGE, ALL)",
                           normalize_numbers(gsi) == [{"IndexName": "attention", "KeySchema": [
                               {"AttributeName": "attention", "KeyType": "HASH"},
                               {"AttributeName": "created_at", "KeyType": "RANGE"}],
                               "Projection": {"ProjectionType": "ALL"}}]
                           and {"AttributeName": "attention", "AttributeType": "S"} in sp["AttributeDefinitions"]
                           and {"AttributeName": "created_at", "AttributeType": "N"} in sp["AttributeDefinitions"],
                           json.dumps(gsi))
                rep.expect(f"[{scen}] {tid} TTL on expires_at",
                           sp.get("TimeToLiveSpecification") == {"AttributeName": "expires_at", "Enabled": True},
                           json.dumps(sp.get("TimeToLiveSpecification")))
                rep.expect(f"[{scen}] {tid} on-demand, SSE on, retained",
                           sp.get("BillingMode") == "PAY_PER_REQUEST"
                           and sp.get("SSESpecification", {}).get("SSEEnabled") is True
                           and s[tid].get("DeletionPolicy") == "Retain")

        # ---- results bucket and its TLS-only policy
        bucket_on = s_ev.params.get("CreateResultsBucket") == "true"
        rep.expect(f"[{scen}] ResultsBucket exists iff CreateResultsBucket (sam)",
                   ("ResultsBucket" in s) == bucket_on and ("ResultsBucketPolicy" in s) == bucket_on)
        for bid in sorted(k for k, v in s.items() if v["Type"] in ("AWS::S3::Bucket", "AWS::S3::BucketPolicy")):
            if bid not in c:
                continue
            rep.same(f"[{scen}] {bid} properties", s[bid]["Properties"], c[bid]["Properties"])
            for pol in ("DeletionPolicy", "UpdateReplacePolicy"):
                rep.same(f"[{scen}] {bid} {pol}", s[bid].get(pol), c[bid].get(pol))
        if "ResultsBucket" in s:
            bp, b = s["ResultsBucket"]["Properties"], s["ResultsBucket"]
            sse = bp.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
            rep.expect(f"[{scen}] ResultsBucket: SSE-S3 (AES256), bucket key on",
                       sse == [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}],
                       json.dumps(sse))
            pab = bp.get("PublicAccessBlockConfiguration", {})
            rep.expect(f"[{scen}] ResultsBucket: public access blocked (all four)",
                       all(pab.get(k) is True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls",
                                                        "RestrictPublicBuckets")), json.dumps(pab))
            rep.expect(f"[{scen}] ResultsBucket: bucket owner enforced (no ACLs)",
                       bp.get("OwnershipControls") == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
            rules = bp.get("LifecycleConfiguration", {}).get("Rules", [])
            want = {"Id": "ExpireResults", "Status": "Enabled", "Prefix": "results/",
                    "ExpirationInDays": RESULTS_RETENTION_DAYS,
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": "1"}}
            rep.expect(f"[{scen}] ResultsBucket: one lifecycle rule expiring results/ after {RESULTS_RETENTION_DAYS} days",
                       normalize_numbers(rules) == [want], f"{json.dumps(rules)}, want [{json.dumps(want)}]")
            rep.expect(f"[{scen}] ResultsBucket: retained on delete and replacement",
                       b.get("DeletionPolicy") == "Retain" and b.get("UpdateReplacePolicy") == "Retain")
        if "ResultsBucketPolicy" in s:
            pp = s["ResultsBucketPolicy"]["Properties"]
            tls = [st for st in as_list(pp.get("PolicyDocument", {}).get("Statement", []))
                   if st.get("Effect") == "Deny" and st.get("Principal") in ("*", {"AWS": "*"})
                   and as_list(st.get("Action")) == ["s3:*"]
                   and st.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
                   and sorted(as_list(st.get("Resource"))) == ["<GetAtt:ResultsBucket.Arn>",
                                                               "<GetAtt:ResultsBucket.Arn>/*"]]
            rep.expect(f"[{scen}] ResultsBucketPolicy: denies s3:* without TLS on the bucket and its objects",
                       pp.get("Bucket") == "<Ref:ResultsBucket>" and len(tls) == 1, json.dumps(pp))

        # ---- functions
        for fid in sorted(k for k, v in s.items() if v["Type"] == "AWS::Lambda::Function"):
            if fid not in c:
                continue
            sv, cv = function_view(s, fid), function_view(c, fid)
            for prop in sv:
                rep.same(f"[{scen}] {fid}.{prop}", sv[prop], cv[prop])
            rep.expect(f"[{scen}] {fid} is provided.al2023 on arm64",
                       sv["Runtime"] == "provided.al2023" and sv["Architectures"] == ["arm64"]
                       and sv["Handler"] == "bootstrap", json.dumps([sv["Runtime"], sv["Architectures"]]))
            # ---- its role
            srole, crole = s[fid]["Properties"]["Role"], c[fid]["Properties"]["Role"]
            rep.same(f"[{scen}] {fid} role", srole, crole)
            m = re.fullmatch(r"<GetAtt:(\w+)\.Arn>", str(srole))
            if m and m.group(1) in c:
                rid = m.group(1)
                sp, cp = role_permissions(s, rid), role_permissions(c, rid)
                rep.same(f"[{scen}] {rid} IAM statements (effect, action, resource)", sp["statements"], cp["statements"])
                rep.same(f"[{scen}] {rid} managed policies", sp["managed"], cp["managed"])
                rep.same(f"[{scen}] {rid} trust policy", sp["trust"], cp["trust"])

        # ---- least privilege on the dedup role (checked on the SAM side; CDK is equal by the above)
        if "DedupFunction" in s:
            rid = re.fullmatch(r"<GetAtt:(\w+)\.Arn>", s["DedupFunction"]["Properties"]["Role"]).group(1)
            st = role_permissions(s, rid)["statements"]
            ddb = {(a, r) for (_, a, r, _) in st if a.startswith("dynamodb:")}
            rep.expect(f"[{scen}] dedup role: exactly GetItem/PutItem/UpdateItem/DeleteItem on the table ARN",
                       ddb == {(a, "<GetAtt:IdempotencyTable.Arn>") for a in DEDUP_ITEM_ACTIONS}, str(sorted(ddb)))
            # Tools: the demo tool, and the functions tagged toolcall-dedup:tool=true (the routed
            # tools are named once, in the config document's routes); GetFunctionConfiguration reads
            # a tool's timeout when its route states none.
            demo = {"<GetAtt:DemoToolFunction.Arn>", "<GetAtt:DemoToolFunction.Arn>:*"}
            lam = {(a, r, cnd) for (_, a, r, cnd) in st if a in TOOL_ACTIONS}
            want_lam = {(a, r, "null") for a in TOOL_ACTIONS for r in demo} | \
                {(a, TAGGED_TOOLS, TOOL_TAG_CONDITION) for a in TOOL_ACTIONS}
            rep.expect(f"[{scen}] dedup role: tool actions on the demo tool and on tagged functions only",
                       lam == want_lam, f"{sorted(lam ^ want_lam)}")
            # The config document: GetParameter on its one parameter.
            config_name = s_ev.params.get("ConfigParameterName") or "<Ref:ConfigParameter>"
            ssm_actions = {(a, r) for (_, a, r, _) in st if a.startswith("ssm:")}
            want_ssm = {("ssm:GetParameter", f"arn:aws:ssm:us-east-1:123456789012:parameter{config_name}")}
            rep.expect(f"[{scen}] dedup role: ssm:GetParameter on the config document only",
                       ssm_actions == want_ssm, f"{sorted(ssm_actions)}, want {sorted(want_ssm)}")
            config_uri = s_ev.params.get("ConfigDocumentUri")
            for side, r in (("sam", s), ("cdk", c)):
                env = r.get("DedupFunction", {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
                want_config = config_uri or f"ssm:{config_name}"
                rep.expect(f"[{scen}] {side}: DEDUP_CONFIG names the document (its URI, else its parameter)",
                           env.get("DEDUP_CONFIG") == want_config, str(env.get("DEDUP_CONFIG")))
                rep.expect(f"[{scen}] {side}: the stack's own document exists iff no ConfigParameterName",
                           ("ConfigParameter" in r) == (not s_ev.params.get("ConfigParameterName")))
            # Unknown outcomes: PutEvents on the account's default bus, which DEDUP_EVENT_BUS names.
            events = {(a, r) for (_, a, r, _) in st if a.startswith("events:")}
            want_events = {("events:PutEvents", "arn:aws:events:us-east-1:123456789012:event-bus/default")}
            rep.expect(f"[{scen}] dedup role: events:PutEvents on the default bus only",
                       events == want_events, f"{sorted(events)}, want {sorted(want_events)}")
            for side, r in (("sam", s), ("cdk", c)):
                env = r.get("DedupFunction", {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
                rep.expect(f"[{scen}] {side}: DEDUP_EVENT_BUS names the bus the role may put events on",
                           env.get("DEDUP_EVENT_BUS") == "default", str(env.get("DEDUP_EVENT_BUS")))
            # Offloaded results: get and put objects under results/ only, and only with the bucket.
            s3 = {(e, a, r, cnd) for (e, a, r, cnd) in st if a.startswith("s3:")}
            objects = s_ev.ev(RESULT_OBJECTS) if bucket_on else None
            want_s3 = {("Allow", a, objects, "null") for a in RESULT_OBJECT_ACTIONS} if bucket_on else set()
            if config_uri:
                want_s3.add(("Allow", "s3:GetObject", CONFIG_OBJECT, "null"))
            what_s3 = ("exactly s3:GetObject/PutObject on results/* of the bucket" if bucket_on
                       else "no s3 action (CreateResultsBucket=false)")
            if config_uri:
                what_s3 += ", and s3:GetObject on the config document's object"
            rep.expect(f"[{scen}] dedup role: " + what_s3,
                       s3 == want_s3, f"{sorted(s3)}, want {sorted(want_s3)}")
            other = {a for (_, a, _, _) in st
                     if not a.startswith("dynamodb:") and a not in TOOL_ACTIONS and a not in RESULT_OBJECT_ACTIONS
                     and a not in ("ssm:GetParameter", "events:PutEvents")}
            rep.expect(f"[{scen}] dedup role: no other inline actions", not other, str(sorted(other)))
            rep.expect(f"[{scen}] dedup role: no wildcard actions or resources (but the tag-bound function:*)",
                       not any("*" == a or a.endswith(":*") or r == "*"
                               or (r.endswith(":function:*") and cnd != TOOL_TAG_CONDITION)
                               for (_, a, r, cnd) in st))

        # ---- the stack's own config document routes every tool to the demo tool, its Timeout stated
        import yaml  # PyYAML, which cfn-lint depends on
        for side, r in (("sam", s), ("cdk", c)):
            if "ConfigParameter" not in r or "DemoToolFunction" not in r:
                continue
            props = r["ConfigParameter"]["Properties"]
            try:
                document = yaml.safe_load(props.get("Value"))
            except (TypeError, yaml.YAMLError):
                document = None
            want = {"routes": {"*": {"function": "<Ref:DemoToolFunction>",
                                     "timeout_seconds": int(r["DemoToolFunction"]["Properties"]["Timeout"])}}}
            rep.expect(f"[{scen}] {side}: the stack's config document routes to the demo tool with its Timeout",
                       document == want, f"{props.get('Value')!r}, want {json.dumps(want)}")
            rep.same(f"[{scen}] {side}: ConfigParameter name, type and tier",
                     {k: props.get(k) for k in ("Name", "Type", "Tier")},
                     {"Name": "/toolcall-dedup/config", "Type": "String", "Tier": "Intelligent-Tiering"})

        # ---- the results bucket the executor is told about
        for side, r in (("sam", s), ("cdk", c)):
            if "DedupFunction" not in r:
                continue
            env = r["DedupFunction"]["Properties"].get("Environment", {}).get("Variables", {})
            want_env = {"DEDUP_RESULTS_BUCKET": "<Ref:ResultsBucket>" if bucket_on else "",
                        "DEDUP_RESULTS_RETENTION_DAYS": RESULTS_RETENTION_DAYS}
            got_env = {k: env.get(k) for k in want_env}
            rep.expect(f"[{scen}] {side}: DEDUP_RESULTS_BUCKET is " + ("the bucket" if bucket_on else '""')
                       + f", DEDUP_RESULTS_RETENTION_DAYS {RESULTS_RETENTION_DAYS}",
                       normalize_numbers(got_env) == want_env, f"{json.dumps(got_env)}, want {json.dumps(want_env)}")

        # ---- operations: alarms, dashboard, tracing, the alias deploys shift
        for rid in sorted(k for k, v in s.items() if v["Type"] in (
                "AWS::CloudWatch::Alarm", "AWS::Lambda::Alias", "AWS::Lambda::Version",
                "AWS::CodeDeploy::Application", "AWS::CodeDeploy::DeploymentGroup")):
            if rid in c:
                rep.same(f"[{scen}] {rid} properties", s[rid]["Properties"], c[rid]["Properties"])
                for attr in ("UpdatePolicy", "DeletionPolicy"):
                    rep.same(f"[{scen}] {rid} {attr}", s[rid].get(attr), c[rid].get(attr))
        for side, r in (("sam", s), ("cdk", c)):
            body = r.get("Dashboard", {}).get("Properties", {}).get("DashboardBody")
            try:
                r.get("Dashboard", {}).get("Properties", {})["DashboardBody"] = json.loads(body)
            except (TypeError, ValueError) as exc:
                rep.fail(f"[{scen}] {side}: the dashboard body is not JSON ({exc})")
        if "Dashboard" in c:
            rep.same(f"[{scen}] Dashboard properties", s["Dashboard"]["Properties"], c["Dashboard"]["Properties"])
        alarms = sorted(k for k, v in s.items() if v["Type"] == "AWS::CloudWatch::Alarm")
        rep.expect(f"[{scen}] alarms: store unavailable, outcome unknown, sessionless, Lambda errors, throttles, "
                   "duration near the timeout, table throttles and system errors, a refused config, tool errors",
                   alarms == sorted(["StoreUnavailableAlarm", "OutcomeUnknownAlarm", "SessionlessAlarm", "ErrorsAlarm",
                                     "ThrottlesAlarm", "DurationNearTimeoutAlarm", "TableThrottlesAlarm",
                                     "TableSystemErrorsAlarm", "ConfigRejectedAlarm", "ToolErrorsAlarm"]), str(alarms))
        topic_on = s_ev.params.get("AlarmTopicArn") != ""
        for aid in alarms:
            p = s[aid]["Properties"]
            want = [s_ev.params["AlarmTopicArn"]] if topic_on else None
            rep.expect(f"[{scen}] {aid} notifies the topic iff AlarmTopicArn",
                       p.get("AlarmActions") == want and p.get("OKActions") == want, json.dumps(p.get("AlarmActions")))
            watched = json.dumps(p)
            rep.expect(f"[{scen}] {aid} watches this stack's function or table",
                       "<Ref:DedupFunction>" in watched or "<Ref:IdempotencyTable>" in watched)
        widgets = json.dumps(s.get("Dashboard", {}).get("Properties", {}).get("DashboardBody"))
        rep.expect(f"[{scen}] the dashboard shows every alarm",
                   all(f"<GetAtt:{a}.Arn>" in widgets for a in alarms))
        fn = s.get("DedupFunction", {}).get("Properties", {})
        rep.expect(f"[{scen}] the executor traces to X-Ray (and may write segments)",
                   fn.get("TracingConfig") == {"Mode": "Active"}
                   and any(str(m).endswith(":policy/AWSXrayWriteOnlyAccess")
                           for m in role_permissions(s, "DedupFunctionRole")["managed"]))
        group = s.get("DedupFunctionDeploymentGroup", {}).get("Properties", {})
        rep.expect(f"[{scen}] deploys shift the live alias gradually and roll back on the store and error alarms",
                   "DedupFunctionAliaslive" in s
                   and s["DedupFunctionAliaslive"]["Properties"].get("FunctionVersion") == "<GetAtt:DedupFunctionVersion.Version>"
                   and group.get("AlarmConfiguration", {}).get("Alarms") == [{"Name": "<Ref:StoreUnavailableAlarm>"},
                                                                           {"Name": "<Ref:ErrorsAlarm>"}]
                   and "DEPLOYMENT_STOP_ON_ALARM" in group.get("AutoRollbackConfiguration", {}).get("Events", []),
                   json.dumps(group))
        invokers = [k for k, v in s.items() if v["Type"] == "AWS::Lambda::Permission"]
        rep.expect(f"[{scen}] agents and gateways invoke the alias, never $LATEST",
                   all(s[k]["Properties"].get("FunctionName") == "<Ref:DedupFunctionAliaslive>" for k in invokers)
                   and "<GetAtt:DedupFunction.Arn>" not in json.dumps(
                       {k: v for k, v in s.items() if v["Type"] in (
                           "AWS::Bedrock::Agent", "AWS::BedrockAgentCore::Gateway", "AWS::IAM::Role")}))

        sweep = s.get("SweepSchedule", {}).get("Properties", {})
        rep.expect(f"[{scen}] a schedule sweeps unsettled at-most-once claims through the alias",
                   [(t.get("Arn"), json.loads(t.get("Input", "null"))) for t in sweep.get("Targets", [])]
                   == [("<Ref:DedupFunctionAliaslive>", {"toolcall-dedup": "sweep"})]
                   and sweep.get("State") == "ENABLED", json.dumps(sweep))

        for gid in (k for k, v in s.items() if v["Type"] == "AWS::BedrockAgentCore::Gateway"):
            mcp = s[gid]["Properties"].get("ProtocolConfiguration", {}).get("Mcp", {})
            timeout = mcp.get("SessionConfiguration", {}).get("SessionTimeoutInSeconds")
            rep.expect(f"[{scen}] {gid} issues MCP sessions (a run for every call of a 2025-11-25 client)",
                       isinstance(timeout, int) and 900 <= timeout <= 28800, json.dumps(mcp))

        # ---- one alias per trust domain: the interceptor door through its own alias alone
        env = fn.get("Environment", {}).get("Variables", {})
        for gid in (k for k, v in s.items() if v["Type"] == "AWS::BedrockAgentCore::Gateway"):
            arns = [ic["Interceptor"]["Lambda"]["Arn"]
                    for ic in s[gid]["Properties"].get("InterceptorConfigurations", [])]
            alias = s.get("InterceptorAlias", {}).get("Properties", {})
            role = json.dumps(role_permissions(s, "InterceptorGatewayRole")["statements"])
            rep.expect(f"[{scen}] {gid} invokes the interceptor's own alias, which the function serves "
                       "the interceptor door through alone, on the published version",
                       arns == ["<Ref:InterceptorAlias>"]
                       and alias.get("FunctionVersion") == "<GetAtt:DedupFunctionVersion.Version>"
                       and env.get("DEDUP_INTERCEPTOR_ALIAS") == alias.get("Name")
                       and "<Ref:InterceptorAlias>" in role and "<Ref:DedupFunctionAliaslive>" not in role,
                       json.dumps([arns, alias, env.get("DEDUP_INTERCEPTOR_ALIAS"), role]))

        # ---- other IAM roles (e.g. the demo agent's)
        fn_roles = {re.sub(r"<GetAtt:(\w+)\.Arn>", r"\1", str(v["Properties"].get("Role")))
                    for v in s.values() if v["Type"] == "AWS::Lambda::Function"}
        for rid in sorted(k for k, v in s.items() if v["Type"] == "AWS::IAM::Role" and k not in fn_roles):
            if rid in c:
                sp, cp = role_permissions(s, rid), role_permissions(c, rid)
                for part in ("statements", "managed", "trust"):
                    rep.same(f"[{scen}] {rid} {part}", sp[part], cp[part])

        # ---- permissions, agent, alias, log groups
        for rid in sorted(k for k, v in s.items() if v["Type"] in (
                "AWS::Lambda::Permission", "AWS::Bedrock::Agent", "AWS::Bedrock::AgentAlias", "AWS::Logs::LogGroup",
                "AWS::BedrockAgentCore::Gateway", "AWS::Events::Rule")):
            if rid in c:
                rep.same(f"[{scen}] {rid} properties", s[rid]["Properties"], c[rid]["Properties"])
                if s[rid]["Type"] == "AWS::Lambda::Permission":
                    p = s[rid]["Properties"]
                    # Bedrock agents, (the executor as a Lambda target) one AgentCore Gateway, or the
                    # sweep's schedule.
                    principal = {"AgentCoreGatewayInvokePermission": "bedrock-agentcore.amazonaws.com",
                                 "SweepInvokePermission": "events.amazonaws.com"}.get(rid, "bedrock.amazonaws.com")
                    rep.expect(f"[{scen}] {rid} is {principal} with SourceAccount and SourceArn",
                               p.get("Principal") == principal and p.get("SourceAccount")
                               and p.get("SourceArn") and "*" not in str(p.get("SourceArn")))
                    if rid == "AgentCoreGatewayInvokePermission":
                        rep.expect(f"[{scen}] {rid} is scoped to one gateway",
                                   ":gateway/" in str(p.get("SourceArn")))

        rep.same(f"[{scen}] outputs", s_ev.outputs(), c_ev.outputs())


# --------------------------------------------------------------------------- self-test
def self_test(sam_tpl: dict, cdk_tpl: dict) -> int:
    def mut_ttl(t): t["Resources"]["IdempotencyTable"]["Properties"]["TimeToLiveSpecification"]["AttributeName"] = "ttl"
    def mut_key(t): t["Resources"]["IdempotencyTable"]["Properties"]["KeySchema"][0]["KeyType"] = "RANGE"
    def mut_runtime(t): t["Resources"]["DedupFunction"]["Properties"]["Runtime"] = "provided.al2"
    def mut_arch(t): t["Resources"]["DemoToolFunction"]["Properties"]["Architectures"] = ["x86_64"]
    def mut_action(t):
        t["Resources"]["DedupFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]["Action"].append("dynamodb:Scan")
    def mut_resource(t):
        t["Resources"]["DedupFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][1]["Resource"] = "*"
    def mut_env(t): del t["Resources"]["DedupFunction"]["Properties"]["Environment"]["Variables"]["DEDUP_MODE"]
    def mut_param(t): t["Parameters"]["FunctionTimeout"]["Default"] = 60
    def mut_perm(t): del t["Resources"]["AgentInvokePermission"]["Properties"]["SourceAccount"]
    def mut_gateway(t): t["Resources"]["AgentCoreGatewayInvokePermission"]["Properties"]["Principal"] = "bedrock.amazonaws.com"
    def mut_config_env(t): del t["Resources"]["DedupFunction"]["Properties"]["Environment"]["Variables"]["DEDUP_CONFIG"]
    def mut_ledger(t): t["Resources"]["DemoToolFunction"]["Properties"]["Environment"]["Variables"]["DEMO_LEDGER"] = "/var/x"
    def mut_namespaces(t): del t["Resources"]["DedupFunction"]["Properties"]["Environment"]["Variables"]["DEDUP_ENVELOPE_NAMESPACES"]
    def mut_min_timeout(t): t["Parameters"]["FunctionTimeout"]["MinValue"] = 1
    def dedup_statements(t):
        return t["Resources"]["DedupFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    def mut_tag_condition(t):  # tagged tools without their tag: every function of the account
        for st in dedup_statements(t):
            if isinstance(st, dict) and st.get("Sid") == "InvokeTaggedTools":
                del st["Condition"]
    def mut_invoke_iam(t):  # no InvokeFunction on the demo tool (found by resource: the Sids differ)
        for st in dedup_statements(t):
            if isinstance(st, dict) and '"DemoToolFunction"' in json.dumps(st.get("Resource")):
                st["Action"] = ["lambda:GetFunctionConfiguration"]
    def mut_ssm_any(t):  # the config read widened to every parameter
        for st in dedup_statements(t):
            if isinstance(st, dict) and st.get("Sid") == "ReadConfigDocument":
                st["Resource"] = {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/*"}
    def mut_route_timeout(t):  # the stack's document states another timeout than the demo tool's
        value = t["Resources"]["ConfigParameter"]["Properties"]["Value"]
        value["Fn::Sub"] = value["Fn::Sub"].replace("timeout_seconds: 10", "timeout_seconds: 30")
    def result_objects(t):  # the dedup role's conditional ResultObjects statement
        stmts = t["Resources"]["DedupFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        return stmts, next(i for i, st in enumerate(stmts) if "ResultObjects" in json.dumps(st))
    def mut_expiration(t):  # the lifecycle expiration no longer the parameter
        t["Resources"]["ResultsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] = 7
    def mut_s3_resource(t):  # result objects anywhere in the bucket
        stmts, i = result_objects(t)
        stmts[i]["Fn::If"][1]["Resource"] = {"Fn::Join": ["", [{"Fn::GetAtt": ["ResultsBucket", "Arn"]}, "/*"]]}
    def mut_s3_unconditional(t):  # the s3 statement kept without the bucket
        stmts, i = result_objects(t)
        stmts[i] = stmts[i]["Fn::If"][1]
    def mut_tls(t): del t["Resources"]["ResultsBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]["Condition"]
    def mut_results_env(t):  # the bucket variable set without the bucket
        t["Resources"]["DedupFunction"]["Properties"]["Environment"]["Variables"]["DEDUP_RESULTS_BUCKET"] = {"Ref": "ResultsBucket"}
    def mut_groups(t):  # a parameter moved to another console group
        groups = t["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        groups[0]["Parameters"].append(groups[1]["Parameters"].pop())
    def mut_alarm_metric(t):  # an alarm watching a metric under another name
        t["Resources"]["OutcomeUnknownAlarm"]["Properties"]["MetricName"] = "unknown"
    def mut_alarm_gone(t):  # an alarm dropped (and from the dashboard)
        del t["Resources"]["SessionlessAlarm"]
        props = t["Resources"]["Dashboard"]["Properties"]
        props["DashboardBody"] = {"Fn::Sub": props["DashboardBody"]["Fn::Sub"].replace('"${SessionlessAlarm.Arn}",', "")}
    def mut_tracing(t): del t["Resources"]["DedupFunction"]["Properties"]["TracingConfig"]
    def mut_index(t): del t["Resources"]["IdempotencyTable"]["Properties"]["GlobalSecondaryIndexes"]
    def mut_latest(t):  # the gateway's interceptor invoking $LATEST instead of the alias
        t["Resources"]["InterceptorGateway"]["Properties"]["InterceptorConfigurations"][0]["Interceptor"]["Lambda"]["Arn"] = \
            {"Fn::GetAtt": ["DedupFunction", "Arn"]}
    def mut_sessions(t):  # the gateway without sessions: every call sessionless
        del t["Resources"]["InterceptorGateway"]["Properties"]["ProtocolConfiguration"]["Mcp"]["SessionConfiguration"]
    def mut_door_alias(t):  # the gateway's role may invoke the harnesses' alias
        role = t["Resources"]["InterceptorGatewayRole"]["Properties"]["Policies"][0]["PolicyDocument"]
        role["Statement"][0]["Resource"] = {"Ref": "DedupFunctionAliaslive"}
    def mut_rollback(t):  # deploys no longer stopped by the store alarm
        t["Resources"]["DedupFunctionDeploymentGroup"]["Properties"]["AlarmConfiguration"]["Alarms"].pop(0)
    def mut_dashboard(t):  # a widget dropped from the dashboard
        props = t["Resources"]["Dashboard"]["Properties"]
        props["DashboardBody"] = {"Fn::Sub": props["DashboardBody"]["Fn::Sub"].replace(
            '"title":"Latency (ms)"', '"title":"Latency"')}
    mutations = [mut_ttl, mut_key, mut_runtime, mut_arch, mut_action, mut_resource, mut_env, mut_param, mut_perm,
                 mut_config_env, mut_ledger, mut_gateway, mut_namespaces, mut_min_timeout,
                 mut_tag_condition, mut_invoke_iam, mut_ssm_any, mut_route_timeout, mut_expiration, mut_s3_resource,
                 mut_s3_unconditional, mut_tls, mut_results_env, mut_groups, mut_alarm_metric, mut_alarm_gone,
                 mut_tracing, mut_index, mut_latest, mut_sessions, mut_door_alias, mut_rollback, mut_dashboard]
    bad = 0
    for mut in mutations:
        tpl = copy.deepcopy(cdk_tpl)
        mut(tpl)
        rep = Report(quiet=True)
        compare(sam_tpl, tpl, rep)
        status = "caught" if rep.failures else "MISSED"
        bad += not rep.failures
        print(f"  self-test {mut.__name__:20s} {status} ({len(rep.failures)} failing checks)")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sam", default="infra/template.yaml")
    ap.add_argument("--cdk", default="infra/cdk/cdk.out/ToolcallDedup.template.json")
    ap.add_argument("--self-test", action="store_true", help="also check that injected mismatches are caught")
    ap.add_argument("-q", "--quiet", action="store_true", help="print failures only")
    args = ap.parse_args()
    for path in (args.sam, args.cdk):
        if not os.path.exists(path):
            print(f"compare_stacks: {path} not found", file=sys.stderr)
            return 2
    sam_tpl, cdk_tpl = load_sam(args.sam), load_json(args.cdk)
    rep = Report(quiet=args.quiet)
    compare(sam_tpl, cdk_tpl, rep)
    for f in rep.failures if args.quiet else []:
        print(f"  FAIL {f}")
    print(f"compare_stacks: {rep.passes} checks passed, {len(rep.failures)} failed")
    rc = 1 if rep.failures else 0
    if args.self_test:
        st = self_test(sam_tpl, cdk_tpl)
        print("compare_stacks: self-test " + ("passed" if st == 0 else "FAILED: a mutation went unnoticed"))
        rc = rc or st
    return rc


if __name__ == "__main__":
    sys.exit(main())
