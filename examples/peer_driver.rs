//! toolcall-dedup's side of `scripts/peer-powertools`: the real handler, the DynamoDB store and the
//! in-process demo tool, driven one JSON line at a time so the orchestrator can count DynamoDB
//! requests at its proxy between invocations. `scripts/peer/powertools_worker.py` speaks the same
//! protocol for Powertools.
//!
//! Configuration is the Lambda's own (`DEDUP_*` variables, `DEMO_LEDGER`); the orchestrator creates
//! the table, so that a start does what the Lambda's does (`scripts/peer/run.py` times cold starts). Requests on stdin, one per line:
//!
//! `{"id": 1, "event": {...}, "remaining_ms": 60000, "fault": {"delay_ms": 0, "raise": false, "result_bytes": 0}}`
//!
//! Each is handled on its own task (so a second call can arrive while the first is in flight);
//! its answer is one line on stdout, in completion order:
//!
//! `{"id": 1, "outcome": "executed", "state": null, "receipt": "ch_…", "body_head": "…", "error": null,
//!   "handler_us": 812.0, "tool_us": 35.0, "handler_cpu_us": 90.0, "tool_cpu_us": 30.0}`
//!
//! `handler_us` is the whole `Handler::handle`; `tool_us` the time inside the dispatcher (the demo
//! tool: its event parsing, the ledger append and its reply), which the orchestrator subtracts;
//! `handler_cpu_us` and `tool_cpu_us` the same spans in process CPU time (the handler's own work,
//! without the time spent waiting for the store).
//! Faults wrap the demo tool: `delay_ms` sleeps before the side effect (and ignores the dispatch
//! timeout, i.e. an owner that outlives its lease), `raise` runs the side effect and then fails
//! like a Lambda `FunctionError` (`Unhandled`), `result_bytes` adds that much random text to the
//! reply body.

#![recursion_limit = "256"]

use toolcall_dedup::test_util::cpu;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::dispatch::DispatchError;
use toolcall_dedup::handler::{Handler, Invocation};
use toolcall_dedup::internals::port::Forward;
use toolcall_dedup::stand_ins::demo::{DemoTool, InProcess, StandIn};
use toolcall_dedup::store::{DynamoDbStore, dynamodb};
use toolcall_dedup::telemetry::Telemetry;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct Fault {
    delay_ms: u64,
    raise: bool,
    result_bytes: usize,
}

#[derive(Debug, Deserialize)]
struct Request {
    id: u64,
    event: Value,
    remaining_ms: Option<i64>,
    #[serde(default)]
    fault: Fault,
}

/// Per invocation: the fault to inject and the time spent in the tool.
struct ToolSlot {
    fault: Fault,
    spent: Duration,
    spent_cpu: Duration,
}

/// Process CPU time: the runtime may move a task between threads, and only one invocation runs
/// at a time while the orchestrator measures.
fn cpu_now() -> Duration {
    cpu::process_cpu_time().unwrap_or_default()
}

tokio::task_local! {
    static SLOT: RefCell<ToolSlot>;
}

/// The demo tool with the invocation's fault applied and its time measured.
struct FaultyDemoTool(DemoTool);

impl StandIn for FaultyDemoTool {
    async fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let (started, started_cpu) = (Instant::now(), cpu_now());
        let fault = SLOT.with(|s| s.borrow().fault.clone());
        if fault.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(fault.delay_ms)).await;
        }
        let mut reply = self.0.answer(target, forward, timeout).await;
        if fault.raise && reply.is_ok() {
            reply = Err(DispatchError::FunctionError {
                target: target.to_string(),
                kind: "Unhandled".into(),
                message: "injected: the tool raised after its side effect".into(),
            });
        }
        if fault.result_bytes > 0 {
            reply = reply.map(|bytes| pad_reply(bytes, fault.result_bytes));
        }
        SLOT.with(|s| {
            let mut slot = s.borrow_mut();
            slot.spent += started.elapsed();
            slot.spent_cpu += cpu_now().saturating_sub(started_cpu);
        });
        reply
    }
}

/// Adds `padding` (random alphanumerics, so gzip cannot shrink it much) to the reply body.
fn pad_reply(bytes: Vec<u8>, size: usize) -> Vec<u8> {
    let mut reply: Value = serde_json::from_slice(&bytes).expect("the demo tool replies JSON");
    let slot = reply
        .pointer_mut("/response/functionResponse/responseBody/TEXT/body")
        .expect("a function-details reply");
    let mut body: Value = serde_json::from_str(slot.as_str().unwrap_or("{}")).unwrap_or(json!({}));
    body["padding"] = Value::String(
        std::iter::repeat_with(fastrand::alphanumeric)
            .take(size)
            .collect(),
    );
    *slot = Value::String(body.to_string());
    serde_json::to_vec(&reply).expect("serializable")
}

/// The receipt, response state and the start of the body of a Bedrock reply.
fn summarize(response: &Value) -> (Value, Value, String) {
    let function_response = response.pointer("/response/functionResponse");
    let state = function_response
        .and_then(|r| r.get("responseState"))
        .cloned()
        .unwrap_or(Value::Null);
    let body = function_response
        .and_then(|r| r.pointer("/responseBody/TEXT/body"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let receipt = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|b| b.get("receipt_id").cloned())
        .unwrap_or(Value::Null);
    (receipt, state, body.chars().take(300).collect())
}

fn wall_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn handle(
    handler: &Handler<DynamoDbStore, InProcess<FaultyDemoTool>>,
    request: Request,
) -> Value {
    let invocation = Invocation {
        request_id: format!("peer-{}", request.id),
        deadline_ms: request.remaining_ms.map(|r| wall_now_ms() + r),
        qualifier: None,
    };
    let slot = RefCell::new(ToolSlot {
        fault: request.fault,
        spent: Duration::ZERO,
        spent_cpu: Duration::ZERO,
    });
    let (handled, handler_time, handler_cpu, tool) = SLOT
        .scope(slot, async {
            let (started, started_cpu) = (Instant::now(), cpu_now());
            let handled = handler.handle(&request.event, &invocation).await;
            let (handler_time, handler_cpu) =
                (started.elapsed(), cpu_now().saturating_sub(started_cpu));
            let tool = SLOT.with(|s| (s.borrow().spent, s.borrow().spent_cpu));
            (handled, handler_time, handler_cpu, tool)
        })
        .await;
    let (receipt, state, body_head, error) = match &handled.response {
        Ok(raw) => {
            let value: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            let (receipt, state, head) = summarize(&value);
            (receipt, state, head, Value::Null)
        }
        Err(e) => (
            Value::Null,
            Value::Null,
            String::new(),
            json!(e.to_string()),
        ),
    };
    json!({
        "id": request.id,
        "outcome": handled.outcome.name(),
        "state": state,
        "receipt": receipt,
        "body_head": body_head,
        "error": error,
        "handler_us": handler_time.as_secs_f64() * 1e6,
        "tool_us": tool.0.as_secs_f64() * 1e6,
        "handler_cpu_us": handler_cpu.as_secs_f64() * 1e6,
        "tool_cpu_us": tool.1.as_secs_f64() * 1e6,
    })
}

// One thread, as the Lambda: one invocation at a time needs no cross-thread wake-ups.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config::from_env(StoreKind::DynamoDb)?;
    let cfg = config.dynamodb()?;
    let client = dynamodb::build_client(config.dynamodb_endpoint.as_deref()).await;
    let store = DynamoDbStore::new(&client, cfg)?;
    let tool = InProcess::new(FaultyDemoTool(DemoTool::from_env()));
    let handler = Arc::new(Handler::new(store, tool, &config, Telemetry::quiet()));

    let (answers, mut outbox) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(answer) = outbox.recv().await {
            let mut line = answer.to_string();
            line.push('\n');
            stdout.write_all(line.as_bytes()).await?;
            stdout.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    println!("{}", json!({"ready": true}));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let request: Request = serde_json::from_str(&line)?;
        let (handler, answers) = (handler.clone(), answers.clone());
        tokio::spawn(async move {
            let answer = handle(&handler, request).await;
            let _ = answers.send(answer);
        });
    }
    drop(answers);
    writer.await??;
    Ok(())
}
