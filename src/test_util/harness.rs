//! The handler tests' harness (also used by `benches/handler.rs` and the CLI's tests): events, handlers, the
//! demo tool, scripted dispatchers and stores, and the assertions on answers. Each test file uses
//! part of it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::dispatch::{DispatchError, Dispatcher};
use crate::doors::port::Forward;
use crate::stand_ins::demo::{DemoTool, InProcess, Ledger, StandIn};

// The names a handler test usually needs, so that `use fixture::*` brings them.
pub use crate::config::{Config, ErrorTypes, LogCalls, Mode, Scope};
pub use crate::handler::{Handled, Handler, HandlerError, Invocation};
pub use crate::key::PolicySet;
pub use crate::stand_ins::events::interceptor_response;
pub use crate::store::{
    ClaimOutcome, ClaimRequest, Completion, DynamoDbConfig, DynamoDbStore, LeaseToken, ManualClock,
    MemoryStore, Record, RequestCounts, RetryPolicy, Status, Store, StoreError,
};
pub use crate::telemetry::{Outcome, Sink, Telemetry};

/// The default configuration with the tool policies of `json` (a policy document).
pub fn policies(json: Value) -> Config {
    Config {
        policies: PolicySet::parse(&json.to_string(), false).expect("a policy set"),
        ..Config::default()
    }
}

/// One sweep through `h`: its answer, and the keys it settled as outcome unknown (and announced).
pub async fn swept_keys<S: crate::store::Records, D: Dispatcher>(
    h: &Handler<S, D>,
    invocation: &Invocation,
) -> (Value, Vec<String>) {
    let swept: Value = serde_json::from_str(h.sweep(invocation).await.unwrap().get()).unwrap();
    let keys = swept["settled_keys"]
        .as_array()
        .expect("the sweep lists the keys it settled")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    (swept, keys)
}

/// The repository root (both packages' tests use this fixture; only the root holds `events/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("samconfig.toml").is_file())
        .expect("the repository root is above the package")
        .to_path_buf()
}

pub fn events_dir() -> PathBuf {
    root().join("events")
}

pub fn event(name: &str) -> Value {
    let path = events_dir().join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn event_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(events_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "events/ has too few files: {names:?}");
    names
}

pub fn handler<S: Store, D: Dispatcher>(store: S, dispatcher: D, config: &Config) -> Handler<S, D> {
    Handler::new(store, dispatcher, config, Telemetry::quiet())
}

/// The zero-configuration handler (memory store, in-process demo tool) with `telemetry`.
pub fn demo_handler(telemetry: Telemetry) -> Handler<MemoryStore, DemoTool> {
    Handler::new(MemoryStore::new(), demo(), &Config::default(), telemetry)
}

/// The client context an event file is sent with (an AgentCore event's
/// `<name>.client-context.json`), read the way `dedup replay` reads it.
pub fn client_context(name: &str) -> Option<crate::handler::ClientContext> {
    crate::stand_ins::events::EventFile::read(events_dir().join(name))
        .unwrap()
        .client_context
}

pub fn demo() -> DemoTool {
    DemoTool::new(Ledger::memory())
}

pub async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle(ev, &Invocation::default()).await
}

pub fn response(h: &Handled) -> Value {
    match &h.response {
        Ok(raw) => serde_json::from_str(raw.get()).unwrap(),
        Err(e) => panic!("expected a Bedrock response, got a Lambda error: {e}"),
    }
}

/// `responseState` of a response of either flavour (None on success).
pub fn state(h: &Handled) -> Option<String> {
    let r = response(h);
    let holder = r["response"]
        .get("functionResponse")
        .unwrap_or(&r["response"]);
    holder
        .get("responseState")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The body of a response of either flavour, parsed.
pub fn body(h: &Handled) -> Value {
    let r = response(h);
    let text = r
        .pointer("/response/functionResponse/responseBody/TEXT/body")
        .or_else(|| r.pointer("/response/responseBody/application~1json/body"))
        .and_then(Value::as_str)
        .expect("a response body");
    serde_json::from_str(text).unwrap()
}

pub fn ledger(tool: &DemoTool) -> Vec<Value> {
    tool.ledger().entries().unwrap()
}

pub fn charges(tool: &DemoTool) -> usize {
    ledger(tool)
        .iter()
        .filter(|e| e["kind"] == "charge")
        .count()
}

pub fn with_attrs(mut ev: Value, attrs: Value) -> Value {
    ev["sessionAttributes"] = attrs;
    ev
}

/// What a scripted dispatcher does on its next invoke.
#[derive(Default)]
pub enum Act {
    #[default]
    Run,
    /// Runs the tool (the side effect happens), then fails with a `FunctionError` of this type.
    RunThenFail(&'static str),
    /// Fails with a `FunctionError` of this type without running the tool.
    Fail(&'static str),
    /// Runs the tool and answers with its reply grown past what one DynamoDB item can hold.
    RunHuge,
    /// Runs the tool, whose reply then sets this session attribute (a Bedrock reply).
    RunSetting(&'static str, &'static str),
    HangBefore(Arc<Notify>),
    HangAfter(Arc<Notify>),
    Malformed,
    Stall,
}

/// The demo tool behind a script of faults; counts invokes.
pub struct Scripted {
    pub demo: DemoTool,
    pub plan: Mutex<VecDeque<Act>>,
    pub invokes: AtomicU32,
}

impl Scripted {
    /// The script as a dispatcher (`with_max_run_time` states the tool's own timeout).
    pub fn new(plan: Vec<Act>) -> InProcess<Scripted> {
        InProcess::new(Scripted {
            demo: demo(),
            plan: Mutex::new(plan.into()),
            invokes: AtomicU32::new(0),
        })
    }

    pub fn invokes(&self) -> u32 {
        self.invokes.load(Ordering::SeqCst)
    }
}

impl StandIn for Scripted {
    async fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let payload = forward.payload;
        self.invokes.fetch_add(1, Ordering::SeqCst);
        let act = self.plan.lock().unwrap().pop_front().unwrap_or_default();
        match act {
            Act::Run => self.demo.invoke(target, payload, timeout).await,
            Act::RunThenFail(kind) => {
                self.demo.invoke(target, payload, timeout).await?;
                Err(function_error(target, kind))
            }
            Act::Fail(kind) => Err(function_error(target, kind)),
            Act::RunHuge => {
                let reply = self.demo.invoke(target, payload, timeout).await?;
                let mut reply: Value = serde_json::from_slice(&reply).unwrap();
                reply["response"]["functionResponse"]["responseBody"]["TEXT"]["body"] =
                    json!(huge_text());
                Ok(serde_json::to_vec(&reply).unwrap())
            }
            Act::RunSetting(name, value) => {
                let reply = self.demo.invoke(target, payload, timeout).await?;
                let mut reply: Value = serde_json::from_slice(&reply).unwrap();
                reply["sessionAttributes"][name] = json!(value);
                Ok(serde_json::to_vec(&reply).unwrap())
            }
            Act::HangBefore(gate) => {
                gate.notified().await;
                self.demo.invoke(target, payload, timeout).await
            }
            Act::HangAfter(gate) => {
                let reply = self.demo.invoke(target, payload, timeout).await;
                gate.notified().await;
                reply
            }
            Act::Malformed => Ok(br#"{"statusCode": 200, "body": "ok"}"#.to_vec()),
            Act::Stall => {
                tokio::time::sleep(timeout).await;
                Err(DispatchError::Timeout {
                    target: target.into(),
                    after: timeout,
                })
            }
        }
    }
}

pub fn function_error(target: &str, kind: &str) -> DispatchError {
    DispatchError::FunctionError {
        target: target.into(),
        kind: kind.into(),
        message: "card network unreachable".into(),
    }
}

/// Text that even gzip cannot fit in one DynamoDB item: 1 MB of random hex.
pub fn huge_text() -> String {
    let mut rng = fastrand::Rng::with_seed(11);
    (0..1_000_000)
        .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap())
        .collect()
}

/// The answer `event`'s door writes from a stored reply (a Bedrock reply gets the event's own
/// session attributes): what a replay of `event` answers with.
pub fn answered_from_stored(event: &Value, stored: &[u8]) -> String {
    let door = crate::handler::Door::detect(event, None).expect("a valid event");
    let dedup = crate::doors::port::DedupInfo {
        outcome: "replayed",
        key: None,
        first_ran_ms: None,
        mark: false,
    };
    door.entry_point()
        .expect("a door that invokes the tool")
        .result(std::str::from_utf8(stored).unwrap(), dedup)
}

/// The record of `handled`'s key.
pub async fn stored<S: Store, D: Dispatcher>(
    h: &Handler<S, D>,
    handled: &Handled,
) -> Option<Record> {
    h.store()
        .get(handled.key.as_deref().unwrap())
        .await
        .unwrap()
}

/// Asserts a tool error the model may act on (REPROMPT; an OpenAPI answer: a 5xx status) and returns its message.
#[track_caller]
pub fn tool_error_message(h: &Handled) -> String {
    // A function-details answer says REPROMPT; an OpenAPI one has no responseState, only its
    // status (documented for function details only).
    let r = response(h);
    let expected = if r["response"].get("apiPath").is_some() {
        assert!(
            r["response"]["httpStatusCode"]
                .as_u64()
                .is_some_and(|s| s >= 500),
            "{r}"
        );
        None
    } else {
        Some("REPROMPT")
    };
    assert_eq!(
        (h.outcome, state(h).as_deref()),
        (Outcome::ToolError, expected)
    );
    body(h)["message"].as_str().unwrap().to_string()
}

/// Sends `ev` through a handler on `store` and `tool` in the background; returns once the call
/// has claimed its key and reached the tool (which hangs until its gate opens).
pub async fn hung_in_tool<S: Store + 'static>(
    store: S,
    tool: InProcess<Scripted>,
    config: &Config,
    ev: &Value,
) -> (
    Arc<Handler<S, InProcess<Scripted>>>,
    tokio::task::JoinHandle<Handled>,
) {
    let h = Arc::new(handler(store, tool, config));
    let task = spawn_send(&h, ev);
    wait_for("the call to reach the tool", || {
        h.dispatcher().invokes() == 1
    })
    .await;
    (h, task)
}

/// Sends `ev` through `h` in the background.
pub fn spawn_send<S, D>(h: &Arc<Handler<S, D>>, ev: &Value) -> tokio::task::JoinHandle<Handled>
where
    S: Store + 'static,
    D: Dispatcher + 'static,
{
    let (h, ev) = (h.clone(), ev.clone());
    tokio::spawn(async move { send(&h, &ev).await })
}

pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The log lines (DEBUG and up, tracing's plain text format) written on this thread while `work`
/// runs, with its output: what an operator reading the function's logs would see. A
/// `#[tokio::test]` runs on the current thread, so the lines are that test's own.
///
/// One global subscriber, installed on first use, writes each line to the capture of the thread
/// that logs it (or nowhere). A scoped subscriber per test (`set_default`) loses lines now and then
/// while other test threads register and drop theirs: tracing's callsite interest and level hint
/// are global.
pub async fn logged<F: std::future::Future>(work: F) -> (F::Output, String) {
    thread_local! {
        static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> =
            const { std::cell::RefCell::new(None) };
    }
    struct ThreadCapture;
    impl std::io::Write for ThreadCapture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|capture| {
                if let Some(lines) = &*capture.borrow() {
                    lines.lock().unwrap().extend_from_slice(bytes);
                }
            });
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadCapture)
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in the test binary");
    });
    let lines = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|capture| *capture.borrow_mut() = Some(lines.clone()));
    let output = work.await;
    CAPTURE.with(|capture| *capture.borrow_mut() = None);
    let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
    (output, text)
}
