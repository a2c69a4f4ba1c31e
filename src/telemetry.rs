//! What the handler reports per invocation:
//!
//! - one `tracing` line (JSON under `AWS_LAMBDA_LOG_FORMAT=JSON`) with the key prefix, outcome,
//!   tool, latency and store request count. Argument values never appear at INFO.
//! - one CloudWatch Embedded Metric Format line with a count per outcome (Lambda only).
//! - with `DEDUP_LOG_CALLS=hashes|full`, one tool-call line for `dedup audit`:
//!   `{"dedup_call":1,"run_id","step","tool","namespace","keys":{strategy: key|null},"rules",
//!   "outcome"}`, plus `"args"` (the argument JSON text) under `full`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::decide::Mode;
use crate::key::{Call, Keyer, Strategy};

/// How one invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The tool ran for this call.
    Executed,
    /// A completed record answered.
    Replayed,
    /// An identical in-flight call finished while this one waited, and its result answered.
    Waited,
    /// An identical call was still running when the wait bound passed: REPROMPT.
    InProgress,
    /// The tool failed, timed out or could not be reached: REPROMPT (or FAILURE without a route).
    ToolError,
    /// The store was unreachable: the tool was not called (fail closed).
    StoreError,
    /// The event or its arguments were invalid; nothing was claimed.
    BadRequest,
    /// Shadow mode: a repeat that enforce mode would have replayed (or waited for) ran again.
    ShadowReplay,
    /// The tool's policy turns deduplication off (`dedup = "off"`): it ran, unclaimed.
    DedupOff,
    /// A Gateway call that names no run ran unclaimed (`DEDUP_SESSIONLESS=pass_through`).
    Sessionless,
    /// A Gateway interceptor message that is not a keyed call (`tools/list`, `initialize`, our
    /// own answers seen again at RESPONSE): passed on untouched.
    PassedOn,
    /// An `at_most_once` call whose outcome is unknown: the tool was not run again, and the
    /// caller is told so until an operator settles the call (`dedup settle`).
    Unknown,
    /// The caller's idempotency key was first used with other arguments: refused, nothing ran.
    KeyReused,
    /// A Gateway interceptor invocation this version does not read (an HTTP target's, an
    /// unknown input version): passed on untouched.
    PassedUnread,
    /// An event of an entry point this deployment does not serve (`DEDUP_DOORS`): refused.
    DoorRefused,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 15] = [
        Outcome::Executed,
        Outcome::Replayed,
        Outcome::Waited,
        Outcome::InProgress,
        Outcome::ToolError,
        Outcome::StoreError,
        Outcome::BadRequest,
        Outcome::ShadowReplay,
        Outcome::DedupOff,
        Outcome::Sessionless,
        Outcome::PassedOn,
        Outcome::Unknown,
        Outcome::KeyReused,
        Outcome::PassedUnread,
        Outcome::DoorRefused,
    ];

    /// The outcome's own name (metrics, logs).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::Waited => "waited",
            Outcome::InProgress => "in_progress",
            Outcome::ToolError => "tool_error",
            Outcome::StoreError => "store_error",
            Outcome::BadRequest => "bad_request",
            Outcome::ShadowReplay => "shadow_replay",
            Outcome::DedupOff => "dedup_off",
            Outcome::Sessionless => "sessionless",
            Outcome::PassedOn => "passed_on",
            Outcome::Unknown => "outcome_unknown",
            Outcome::KeyReused => "idempotency_key_reused",
            Outcome::PassedUnread => "passed_unread",
            Outcome::DoorRefused => "door_refused",
        }
    }

    /// The word a caller reads in `dedup.outcome`: `executed` for a call that ran (shadow
    /// repeats included), `replayed` for one answered from the store (waited-for calls
    /// included), else the outcome's own name.
    pub(crate) fn caller_word(self) -> &'static str {
        match self {
            Outcome::Executed
            | Outcome::ShadowReplay
            | Outcome::DedupOff
            | Outcome::Sessionless => "executed",
            Outcome::Replayed | Outcome::Waited => "replayed",
            other => other.name(),
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The per-call log line for `dedup audit` (`DEDUP_LOG_CALLS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogCalls {
    /// No tool-call line (the default).
    Off,
    /// Keys under every strategy, no argument values.
    Hashes,
    /// Keys and the argument text.
    Full,
}

/// Where the structured lines (EMF, tool-call log) go.
#[derive(Debug, Clone, Default)]
pub enum Sink {
    /// Standard output, one line per write (Lambda ships stdout to CloudWatch Logs).
    #[default]
    Stdout,
    /// Kept in memory (tests).
    Memory(Arc<Mutex<Vec<String>>>),
    /// Dropped (see [`Telemetry::quiet`]).
    Discard,
}

impl Sink {
    /// A memory sink and the handle to read it.
    pub fn memory() -> (Sink, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        (Sink::Memory(lines.clone()), lines)
    }

    fn write_line(&self, line: &str) {
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                // A closed stdout must not fail the invocation.
                let _ = out
                    .write_all(line.as_bytes())
                    .and_then(|_| out.write_all(b"\n"));
                let _ = out.flush();
            }
            Sink::Memory(lines) => lines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line.to_string()),
            Sink::Discard => {}
        }
    }
}

/// One invocation, as reported.
#[derive(Debug, Clone)]
pub(crate) struct InvocationReport<'a> {
    /// The Lambda request id of the invocation.
    pub(crate) request_id: &'a str,
    /// The `DEDUP_MODE` in force.
    pub(crate) mode: Mode,
    /// How the invocation ended; the EMF line counts it.
    pub(crate) outcome: Outcome,
    /// The entry point the event came in by (`bedrock`, `agentcore`, `interceptor`,
    /// `envelope`); `None` when it was no door's.
    pub(crate) door: Option<&'a str>,
    /// The tool called; `None` when the event was refused before a tool was known.
    pub(crate) tool: Option<&'a str>,
    /// The derived key; `None` when none was derived (pass-through, refused events). Only its
    /// first 12 characters are logged.
    pub(crate) key: Option<&'a str>,
    /// Wall time of the whole invocation, from event to answer.
    pub(crate) latency: Duration,
    /// Requests this invocation sent to the idempotency store (retries included).
    pub(crate) store_requests: u64,
    /// Calls this invocation left with their outcome unknown, for an operator to settle
    /// (`dedup list --state unknown`).
    pub(crate) settled_unknown: u64,
    /// Normalization rules that made a replayed call meet the stored one.
    pub(crate) rules: &'a [&'static str],
    /// A short reason for error outcomes (never argument values).
    pub(crate) reason: Option<&'a str>,
}

/// What names the EMF metrics: where they go and how they are split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// The CloudWatch namespace (`DEDUP_METRICS_NAMESPACE`).
    pub(crate) namespace: String,
    /// The `Service` dimension: the function's name (`AWS_LAMBDA_FUNCTION_NAME`, or
    /// `DEDUP_METRICS_SERVICE`), so that two stacks in one account and namespace stay apart.
    pub service: String,
    /// Tools with a `Tool` dimension of their own, per container (`DEDUP_METRICS_MAX_TOOLS`);
    /// the tools first seen beyond them are counted as `other`. Each named tool costs its own
    /// custom metrics, so the bound is the bill's.
    pub(crate) max_tools: usize,
}

/// Default `Service` dimension outside Lambda.
pub(crate) const DEFAULT_METRICS_SERVICE: &str = "toolcall-dedup";
/// Default for [`MetricsSettings::max_tools`].
pub(crate) const DEFAULT_METRICS_MAX_TOOLS: usize = 25;
/// The `Tool` dimension of tools past [`MetricsSettings::max_tools`].
pub(crate) const OTHER_TOOLS: &str = "other";
/// The metric of a refused config document ([`Telemetry::config_rejected`]).
pub(crate) const CONFIG_REJECTED: &str = "config_rejected";
/// The `Door` or `Tool` dimension of an invocation that had none.
pub(crate) const NO_DIMENSION: &str = "none";

impl MetricsSettings {
    /// `namespace` with the default service and tool bound.
    pub(crate) fn new(namespace: impl Into<String>) -> MetricsSettings {
        MetricsSettings {
            namespace: namespace.into(),
            service: DEFAULT_METRICS_SERVICE.into(),
            max_tools: DEFAULT_METRICS_MAX_TOOLS,
        }
    }
}

/// Reports invocations and tool calls.
#[derive(Debug, Clone)]
pub struct Telemetry {
    log_calls: LogCalls,
    /// EMF's head and tool folding, when EMF is on.
    emf: Option<Arc<Emf>>,
    sink: Sink,
}

/// The EMF writer of one deployment: the metric definitions written once, and the tools that
/// have a dimension of their own.
#[derive(Debug)]
struct Emf {
    head: EmfHead,
    tools: ToolNames,
    namespace: String,
    service: String,
}

impl Emf {
    fn new(settings: &MetricsSettings) -> Arc<Emf> {
        Arc::new(Emf {
            head: EmfHead::new(&settings.namespace, &settings.service),
            tools: ToolNames::new(settings.max_tools),
            namespace: settings.namespace.clone(),
            service: settings.service.clone(),
        })
    }
}

/// The tools with a dimension of their own: the first `max` seen, in the order seen.
#[derive(Debug)]
struct ToolNames {
    named: Mutex<Vec<Box<str>>>,
    max: usize,
}

impl ToolNames {
    fn new(max: usize) -> ToolNames {
        ToolNames {
            named: Mutex::new(Vec::new()),
            max,
        }
    }

    /// `tool`'s dimension value: its name while there is room, else [`OTHER_TOOLS`]. A name
    /// CloudWatch would refuse as a dimension value (not printable ASCII, over 1,024 bytes, only
    /// spaces) counts as [`OTHER_TOOLS`] too, so its metrics are never dropped with the line.
    fn dimension<'t>(&self, tool: Option<&'t str>) -> &'t str {
        let Some(tool) = tool else {
            return NO_DIMENSION;
        };
        if !is_dimension_value(tool) {
            return OTHER_TOOLS;
        }
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        if named.iter().any(|n| **n == *tool) {
            tool
        } else if named.len() < self.max {
            named.push(tool.into());
            tool
        } else {
            OTHER_TOOLS
        }
    }
}

/// Whether CloudWatch takes `value` as a dimension value: 1 to 1,024 printable ASCII characters,
/// not all spaces (PutMetricData's `Dimension`).
fn is_dimension_value(value: &str) -> bool {
    (1..=1024).contains(&value.len())
        && value.bytes().all(|b| (b' '..=b'~').contains(&b))
        && value.bytes().any(|b| b != b' ')
}

impl Telemetry {
    /// The Lambda's telemetry: EMF as `metrics` says and the call log on stdout.
    pub fn lambda(metrics: &MetricsSettings, log_calls: LogCalls) -> Telemetry {
        Telemetry {
            log_calls,
            emf: Some(Emf::new(metrics)),
            sink: Sink::Stdout,
        }
    }

    /// `dedup replay`'s telemetry: the call log on stdout, no EMF.
    pub fn replay(log_calls: LogCalls) -> Telemetry {
        Telemetry {
            log_calls,
            emf: None,
            sink: Sink::Stdout,
        }
    }

    /// Nothing but the tracing line.
    pub fn quiet() -> Telemetry {
        Telemetry {
            log_calls: LogCalls::Off,
            emf: None,
            sink: Sink::Discard,
        }
    }

    /// Writes the structured lines to `sink` instead.
    pub fn with_sink(mut self, sink: Sink) -> Telemetry {
        self.sink = sink;
        self
    }

    /// Overrides the tool-call line setting (`DEDUP_LOG_CALLS`).
    pub fn with_log_calls(mut self, log_calls: LogCalls) -> Telemetry {
        self.log_calls = log_calls;
        self
    }

    /// Writes an EMF line per invocation under `namespace` (default service and tool bound), or
    /// none with `None`.
    pub fn with_emf(mut self, namespace: Option<String>) -> Telemetry {
        self.emf = namespace.map(|ns| Emf::new(&MetricsSettings::new(ns)));
        self
    }

    /// Writes an EMF line per invocation as `metrics` says.
    pub fn with_metrics(mut self, metrics: &MetricsSettings) -> Telemetry {
        self.emf = Some(Emf::new(metrics));
        self
    }

    /// The `DEDUP_LOG_CALLS` setting in force.
    pub fn log_calls(&self) -> LogCalls {
        self.log_calls
    }

    /// The per-invocation tracing line and EMF line.
    pub(crate) fn invocation(&self, r: &InvocationReport<'_>) {
        let key_prefix = r.key.map(|k| &k[..k.len().min(12)]).unwrap_or("");
        let latency_ms = r.latency.as_secs_f64() * 1000.0;
        let rules = r.rules.join(",");
        match r.outcome {
            Outcome::ToolError | Outcome::StoreError => tracing::warn!(
                request_id = r.request_id,
                mode = %r.mode,
                outcome = r.outcome.name(),
                door = r.door.unwrap_or(""),
                tool = r.tool.unwrap_or(""),
                key_prefix,
                latency_ms,
                store_requests = r.store_requests,
                reason = r.reason.unwrap_or(""),
                "dedup invocation"
            ),
            _ => tracing::info!(
                request_id = r.request_id,
                mode = %r.mode,
                outcome = r.outcome.name(),
                door = r.door.unwrap_or(""),
                tool = r.tool.unwrap_or(""),
                key_prefix,
                latency_ms,
                store_requests = r.store_requests,
                rules,
                reason = r.reason.unwrap_or(""),
                "dedup invocation"
            ),
        }
        if let Some(emf) = &self.emf {
            let tool = emf.tools.dimension(r.tool);
            self.sink.write_line(&emf.head.line(r, tool, now_ms()));
        }
    }

    /// One `config_rejected` count: a config document was refused and the last good one stays
    /// (an EMF line of its own, under the `Service` dimension).
    pub fn config_rejected(&self) {
        self.service_metric(CONFIG_REJECTED, 1);
    }

    /// One EMF line of one count under the `Service` dimension alone.
    fn service_metric(&self, name: &str, value: u64) {
        let Some(emf) = &self.emf else { return };
        let line = json!({
            "_aws": {
                "Timestamp": now_ms(),
                "CloudWatchMetrics": [{
                    "Namespace": emf.namespace,
                    "Dimensions": [["Service"]],
                    "Metrics": [{"Name": name, "Unit": "Count"}],
                }],
            },
            "Service": emf.service,
            name: value,
        });
        self.sink.write_line(&line.to_string());
    }

    /// One sweep's report ([`crate::sweep`]): a log line, and the calls it settled as outcome
    /// unknown as `settled_unknown` under the `Service` dimension (what the alarm watches).
    pub(crate) fn swept(&self, request_id: &str, found: usize, settled: usize) {
        tracing::info!(request_id, found, settled, "dedup sweep");
        self.service_metric("settled_unknown", settled as u64);
    }

    /// The tool-call line for `dedup audit`, if `DEDUP_LOG_CALLS` asks for it.
    pub fn call(&self, keyer: &Keyer, call: &Call<'_>, outcome: Outcome) {
        if self.log_calls == LogCalls::Off {
            return;
        }
        let line = call_line(keyer, call, outcome, self.log_calls == LogCalls::Full);
        self.sink.write_line(&line.to_string());
    }
}

/// The dimension set every metric is published under: the whole service (what the alarms watch).
pub(crate) const SERVICE_DIMENSIONS: &[&str] = &["Service"];
/// The set a few metrics are also published under: per door and tool (what the dashboard splits
/// by, and where an operator looks for the tool behind an alarm).
pub(crate) const TOOL_DIMENSIONS: &[&str] = &["Service", "Door", "Tool"];
/// The metrics published per door and tool: the dashboard's executions and replays, and the two
/// outcomes an alarm pages on whose tool the operator must find. Each named tool costs this many
/// custom metrics per door it comes in by, not all eighteen (CloudWatch prices each).
pub(crate) const PER_TOOL_METRICS: [Outcome; 4] = [
    Outcome::Executed,
    Outcome::Replayed,
    Outcome::ToolError,
    Outcome::Unknown,
];

/// The start of every EMF line of one namespace (the metric definitions), written once: only the
/// timestamp and the values change from one invocation to the next.
#[derive(Debug, Clone)]
struct EmfHead {
    text: String,
}

impl EmfHead {
    fn new(namespace: &str, service: &str) -> EmfHead {
        use crate::key::push_json_str;
        let counts = |outcomes: &[Outcome]| -> Vec<Value> {
            outcomes
                .iter()
                .map(|o| json!({"Name": o.name(), "Unit": "Count"}))
                .collect()
        };
        let mut service_metrics = counts(&Outcome::ALL);
        service_metrics.extend([
            json!({"Name": "latency_ms", "Unit": "Milliseconds"}),
            json!({"Name": "store_requests", "Unit": "Count"}),
            json!({"Name": "settled_unknown", "Unit": "Count"}),
        ]);
        let directives = json!([
            {"Namespace": namespace, "Dimensions": [SERVICE_DIMENSIONS], "Metrics": service_metrics},
            {"Namespace": namespace, "Dimensions": [TOOL_DIMENSIONS], "Metrics": counts(&PER_TOOL_METRICS)},
        ]);
        let mut text = String::with_capacity(720);
        text.push_str("{\"Service\":");
        push_json_str(&mut text, service);
        text.push_str(",\"_aws\":{\"CloudWatchMetrics\":");
        text.push_str(&directives.to_string());
        text.push_str(",\"Timestamp\":");
        EmfHead { text }
    }

    fn line(&self, r: &InvocationReport<'_>, tool_dimension: &str, timestamp_ms: i64) -> String {
        use crate::key::push_json_str;
        use std::fmt::Write as _;
        let mut out = String::with_capacity(self.text.len() + 400);
        out.push_str(&self.text);
        let _ = write!(out, "{timestamp_ms}}}");
        out.push_str(",\"Door\":");
        push_json_str(&mut out, r.door.unwrap_or(NO_DIMENSION));
        out.push_str(",\"Tool\":");
        push_json_str(&mut out, tool_dimension);
        for o in Outcome::ALL {
            out.push_str(",\"");
            out.push_str(o.name());
            out.push_str(if o == r.outcome { "\":1" } else { "\":0" });
        }
        let latency_ms = (r.latency.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
        // The same number text serde_json writes for an f64.
        match serde_json::Number::from_f64(latency_ms) {
            Some(n) => {
                let _ = write!(out, ",\"latency_ms\":{n}");
            }
            None => out.push_str(",\"latency_ms\":0"),
        }
        let _ = write!(
            out,
            ",\"store_requests\":{},\"settled_unknown\":{},\"outcome\":\"{}\",\"mode\":\"{}\"",
            r.store_requests,
            r.settled_unknown,
            r.outcome.name(),
            r.mode.name()
        );
        if let Some(tool) = r.tool {
            out.push_str(",\"tool\":");
            push_json_str(&mut out, tool);
        }
        if !r.request_id.is_empty() {
            out.push_str(",\"requestId\":");
            push_json_str(&mut out, r.request_id);
        }
        out.push('}');
        out
    }
}

/// The tool-call line: keys under every strategy (null where a strategy fails on these args).
pub fn call_line(keyer: &Keyer, call: &Call<'_>, outcome: Outcome, with_args: bool) -> Value {
    let mut keys = Map::new();
    let (every_key, typed_rules) = keyer.every_key(call);
    for (strategy, key) in Strategy::ALL.into_iter().zip(every_key) {
        keys.insert(strategy.name().into(), json!(key.map(|k| k.to_string())));
    }
    let rules: Vec<&str> = typed_rules.names().collect();
    let mut line = json!({
        "dedup_call": 1,
        "run_id": call.run_id,
        "step": call.step,
        "tool": call.tool,
        "namespace": call.namespace,
        "keys": keys,
        "rules": rules,
        "outcome": outcome.name(),
    });
    if with_args {
        line["args"] = json!(call.args);
    }
    line
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`emf_line`] as the JSON text written per invocation, built without a `serde_json::Value`
    /// (it is on every invocation's path).
    fn emf_text(dims: &EmfDimensions<'_>, r: &InvocationReport<'_>, timestamp_ms: i64) -> String {
        EmfHead::new(dims.namespace, dims.service).line(r, dims.tool, timestamp_ms)
    }

    /// What one EMF line is filed under.
    #[derive(Debug, Clone, Copy)]
    struct EmfDimensions<'a> {
        /// The CloudWatch namespace.
        namespace: &'a str,
        /// The `Service` dimension.
        service: &'a str,
        /// The `Tool` dimension (the tool's name, [`OTHER_TOOLS`] or [`NO_DIMENSION`]).
        tool: &'a str,
    }

    /// The EMF document of one invocation: every outcome is a Count metric (1 for this one's, 0 for
    /// the others), so sums give counts per outcome and averages give rates.
    fn emf_line(dims: &EmfDimensions<'_>, r: &InvocationReport<'_>, timestamp_ms: i64) -> Value {
        let mut metrics: Vec<Value> = Outcome::ALL
            .iter()
            .map(|o| json!({"Name": o.name(), "Unit": "Count"}))
            .collect();
        metrics.push(json!({"Name": "latency_ms", "Unit": "Milliseconds"}));
        metrics.push(json!({"Name": "store_requests", "Unit": "Count"}));
        metrics.push(json!({"Name": "settled_unknown", "Unit": "Count"}));
        let per_tool: Vec<Value> = PER_TOOL_METRICS
            .iter()
            .map(|o| json!({"Name": o.name(), "Unit": "Count"}))
            .collect();
        let mut doc = Map::new();
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": dims.namespace,
                    "Dimensions": [SERVICE_DIMENSIONS],
                    "Metrics": metrics,
                }, {
                    "Namespace": dims.namespace,
                    "Dimensions": [TOOL_DIMENSIONS],
                    "Metrics": per_tool,
                }],
            }),
        );
        doc.insert("Service".into(), json!(dims.service));
        doc.insert("Door".into(), json!(r.door.unwrap_or(NO_DIMENSION)));
        doc.insert("Tool".into(), json!(dims.tool));
        for o in Outcome::ALL {
            doc.insert(o.name().into(), json!(u8::from(o == r.outcome)));
        }
        doc.insert(
            "latency_ms".into(),
            json!((r.latency.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0),
        );
        doc.insert("store_requests".into(), json!(r.store_requests));
        doc.insert("settled_unknown".into(), json!(r.settled_unknown));
        doc.insert("outcome".into(), json!(r.outcome.name()));
        doc.insert("mode".into(), json!(r.mode.name()));
        if let Some(tool) = r.tool {
            doc.insert("tool".into(), json!(tool));
        }
        if !r.request_id.is_empty() {
            doc.insert("requestId".into(), json!(r.request_id));
        }
        Value::Object(doc)
    }

    fn report(outcome: Outcome) -> InvocationReport<'static> {
        InvocationReport {
            request_id: "r1",
            mode: Mode::Enforce,
            outcome,
            door: Some("bedrock"),
            tool: Some("charge_card"),
            key: Some("0123456789abcdef0123456789abcdef"),
            latency: Duration::from_millis(12),
            store_requests: 1,
            settled_unknown: 0,
            rules: &[],
            reason: None,
        }
    }

    const DIMS: EmfDimensions<'static> = EmfDimensions {
        namespace: "N\"S",
        service: "fn-\"1",
        tool: "charge_card",
    };

    #[test]
    fn the_emf_text_is_the_emf_document() {
        for outcome in Outcome::ALL {
            let mut r = report(outcome);
            r.latency = Duration::from_micros(12_345);
            let text = emf_text(&DIMS, &r, 1_700_000_000_000);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed, emf_line(&DIMS, &r, 1_700_000_000_000), "{text}");
        }
        let mut r = report(Outcome::Executed);
        r.tool = None;
        r.door = None;
        r.request_id = "";
        let parsed: Value = serde_json::from_str(&emf_text(&DIMS, &r, 1)).unwrap();
        assert_eq!(parsed, emf_line(&DIMS, &r, 1));
        assert_eq!(parsed["Door"], "none");
    }

    #[test]
    fn tools_past_the_bound_are_counted_as_other() {
        let settings = MetricsSettings {
            max_tools: 2,
            ..MetricsSettings::new("NS")
        };
        let (sink, lines) = Sink::memory();
        let telemetry = Telemetry::quiet().with_sink(sink).with_metrics(&settings);
        for tool in ["a", "b", "c", "a", "b", "d"] {
            let mut r = report(Outcome::Executed);
            r.tool = Some(tool);
            telemetry.invocation(&r);
        }
        let tools: Vec<String> = lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["Tool"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(tools, ["a", "b", "other", "a", "b", "other"]);
    }

    #[test]
    fn emf_counts_exactly_the_outcome_that_happened() {
        let doc = emf_line(&DIMS, &report(Outcome::Replayed), 1_700_000_000_000);
        let directives = doc["_aws"]["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 2);
        assert_eq!(directives[0]["Dimensions"], json!([["Service"]]));
        assert_eq!(
            directives[1]["Dimensions"],
            json!([["Service", "Door", "Tool"]])
        );
        let names = |d: &Value| -> Vec<String> {
            d["Metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["Name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&directives[0]).len(), INVOCATION_METRICS);
        assert_eq!(
            names(&directives[1]),
            ["executed", "replayed", "tool_error", "outcome_unknown"]
        );
        for directive in directives {
            assert_eq!(directive["Namespace"], "N\"S");
            for set in directive["Dimensions"].as_array().unwrap() {
                for dimension in set.as_array().unwrap() {
                    assert!(doc[dimension.as_str().unwrap()].is_string(), "{dimension}");
                }
            }
            for name in names(directive) {
                assert!(
                    doc.get(&name).is_some_and(Value::is_number),
                    "target member {name} missing"
                );
            }
        }
        assert_eq!(doc["Service"], "fn-\"1");
        assert_eq!(doc["Door"], "bedrock");
        assert_eq!(doc["Tool"], "charge_card");
        assert_eq!(doc["replayed"], 1);
        assert_eq!(doc["executed"], 0);
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
    }

    /// Metrics of an invocation's line under the `Service` set: one count per outcome, latency,
    /// store requests, and the calls settled as outcome unknown...
    const INVOCATION_METRICS: usize = Outcome::ALL.len() + 3;
    /// ...and every metric under it: those, and `config_rejected`, a line of its own.
    const SERVICE_METRICS: usize = INVOCATION_METRICS + 1;

    /// The custom metrics a function publishes with `tools` named tools arriving by `doors` doors.
    fn custom_metrics(tools: usize, doors: usize) -> usize {
        SERVICE_METRICS + tools * doors * PER_TOOL_METRICS.len()
    }

    /// docs/operations.md prices the custom metrics of 25 named tools through one door, the stacks'
    /// `DEDUP_METRICS_MAX_TOOLS` default: the figures there are these.
    #[test]
    fn the_documented_metric_count_and_price_are_the_functions() {
        let count = custom_metrics(DEFAULT_METRICS_MAX_TOOLS, 1);
        assert_eq!(count, 19 + 25 * 4);
        // CloudWatch's first 10,000 custom metrics: $0.30 per metric per month.
        let dollars = count as f64 * 0.30;
        let docs = include_str!("../docs/operations.md");
        let sentence = format!("{count} custom metrics, about ${dollars:.2} a month");
        assert!(
            docs.contains(&sentence),
            "docs/operations.md must say: {sentence}"
        );
        assert!(docs.contains(&format!(
            "{} more per further door",
            DEFAULT_METRICS_MAX_TOOLS * 4
        )));
    }

    #[test]
    fn call_lines_carry_every_strategy_and_args_only_when_full() {
        let keyer = Keyer::new();
        let call = Call {
            tool: "charge_card",
            args: r#"{"amount":"42.50"}"#,
            namespace: Some("A/payments"),
            run_id: Some("s1"),
            step: Some("3"),
            ..Call::default()
        };
        let hashes = call_line(&keyer, &call, Outcome::Executed, false);
        assert_eq!(hashes["dedup_call"], 1);
        for s in Strategy::ALL {
            assert!(hashes["keys"][s.name()].is_string(), "{s}");
        }
        assert!(hashes.get("args").is_none());
        assert_eq!(hashes["outcome"], "executed");
        let full = call_line(&keyer, &call, Outcome::Replayed, true);
        assert_eq!(full["args"], r#"{"amount":"42.50"}"#);
        let (sink, lines) = Sink::memory();
        Telemetry::quiet()
            .with_sink(sink)
            .with_log_calls(LogCalls::Hashes)
            .call(&keyer, &call, Outcome::Executed);
        assert_eq!(lines.lock().unwrap().len(), 1);
    }
}
