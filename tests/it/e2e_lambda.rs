//! End to end through the Lambda runtime API, with no AWS account and no Docker.
//!
//! `cargo lambda watch --only-lambda-apis` emulates the Lambda control plane (invoke API and
//! runtime API). The real `toolcall-dedup` and `demo-tool` binaries, built by this test run, serve
//! as its two functions (each polls the runtime API under its function name), so nothing is
//! recompiled. The executor's dispatcher invokes `demo-tool` through the emulator with
//! `aws-sdk-lambda` (`DEDUP_LAMBDA_ENDPOINT`), and `cargo lambda invoke --data-file` sends the
//! events. The store is moto when `DEDUP_TEST_MOTO_ENDPOINT` is set, else the in-memory store.
//!
//! Ignored by a plain `cargo test`, because it needs `cargo-lambda`: `scripts/test` installs it
//! (in a venv outside the crate: the watcher must never see its files change) and runs this test
//! with `--ignored`. Run alone, it fails loudly if `cargo-lambda` cannot be found (on `PATH`, or at
//! `$CARGO_LAMBDA`).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The demo tool's binary. It belongs to the `dedup-cli` package, so cargo defines no
/// `CARGO_BIN_EXE_` for it here; a workspace build puts it beside this package's binaries.
fn demo_tool_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_toolcall-dedup")).with_file_name("demo-tool");
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build -p dedup-cli --bin demo-tool`",
        path.display()
    );
    path
}

/// A child process killed (and reaped) when dropped, so a failing test leaves nothing running.
struct Proc {
    name: &'static str,
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, child }
    }

    fn assert_running(&mut self, log: &Path) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{} exited early ({status}):\n{text}", self.name);
        }
    }
}

/// Prints the processes' logs if the test fails (the temp directory is gone afterwards).
struct DumpOnPanic(Vec<PathBuf>);

impl Drop for DumpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for log in &self.0 {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                eprintln!("----- {} -----\n{text}", log.display());
            }
        }
    }
}

fn cargo_lambda() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CARGO_LAMBDA").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("cargo-lambda"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16, watch: &mut Proc, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        watch.assert_running(log);
        assert!(
            Instant::now() < deadline,
            "cargo lambda watch did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Relays in front of `cargo lambda watch` that carry a Lambda client context the way Lambda does.
/// Lambda's Invoke API takes it base64-encoded (`X-Amz-Client-Context`, as `aws-sdk-lambda` sends
/// it) and the runtime API hands it to the function decoded, as JSON
/// (`Lambda-Runtime-Client-Context`). The emulator (cargo-lambda 1.9) ignores
/// `X-Amz-Client-Context`, reads its own `lambda-runtime-client-context` request header (what
/// `cargo lambda invoke --client-context-ascii` sends), and hands that to the function
/// base64-encoded, which the Rust runtime cannot parse (the function stops). So:
/// - [`Relay::InvokeApi`] (the executor's `DEDUP_LAMBDA_ENDPOINT`) turns `X-Amz-Client-Context`
///   into `lambda-runtime-client-context`;
/// - [`Relay::RuntimeApi`] (each function's `AWS_LAMBDA_RUNTIME_API`) decodes the header of the
///   next invocation.
///
/// Each request gets `Connection: close`, so each connection carries one exchange to rewrite.
#[derive(Debug, Clone, Copy)]
enum Relay {
    InvokeApi,
    RuntimeApi,
}

impl Relay {
    /// Starts the relay to `upstream`; returns its port.
    fn start(self, upstream: u16) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = self.relay(client, upstream);
                });
            }
        });
        port
    }

    fn relay(self, mut client: std::net::TcpStream, upstream: u16) -> std::io::Result<()> {
        use std::io::Write;
        let mut server = std::net::TcpStream::connect(("127.0.0.1", upstream))?;
        let (head, rest) = read_head(&mut client)?;
        let mut request = String::new();
        for line in head.split("\r\n") {
            match line.split_once(':') {
                Some((name, _)) if name.eq_ignore_ascii_case("connection") => continue,
                Some((name, value))
                    if matches!(self, Relay::InvokeApi)
                        && name.eq_ignore_ascii_case("x-amz-client-context") =>
                {
                    request.push_str("lambda-runtime-client-context: ");
                    request.push_str(&decode_base64(value.trim())?);
                }
                _ => request.push_str(line),
            }
            request.push_str("\r\n");
        }
        request.push_str("connection: close\r\n\r\n");
        server.write_all(request.as_bytes())?;
        server.write_all(&rest)?;
        let (mut from_client, mut to_server) = (client.try_clone()?, server.try_clone()?);
        std::thread::spawn(move || std::io::copy(&mut from_client, &mut to_server));
        if matches!(self, Relay::RuntimeApi) {
            let (head, rest) = read_head(&mut server)?;
            let mut response = String::new();
            for line in head.split("\r\n") {
                match line.split_once(':') {
                    Some((name, value))
                        if name.eq_ignore_ascii_case("lambda-runtime-client-context") =>
                    {
                        response.push_str(name);
                        response.push_str(": ");
                        response.push_str(&decode_base64(value.trim())?);
                    }
                    _ => response.push_str(line),
                }
                response.push_str("\r\n");
            }
            response.push_str("\r\n");
            client.write_all(response.as_bytes())?;
            client.write_all(&rest)?;
        }
        std::io::copy(&mut server, &mut client)?;
        client.shutdown(std::net::Shutdown::Both)
    }
}

fn decode_base64(text: &str) -> std::io::Result<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(std::io::Error::other)?;
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

/// Reads an HTTP head up to (not including) the blank line; returns it and the bytes after it.
fn read_head(stream: &mut std::net::TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Ok((head, buf[end + 4..].to_vec()));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Runs a command to completion within `limit`, returning its stdout.
fn run(cmd: &mut Command, limit: Duration) -> String {
    let (succeeded, out, err) = run_to_end(cmd, limit);
    assert!(succeeded, "{cmd:?} failed:\n{out}\n{err}");
    out
}

/// Runs `cmd` to its end within `limit`: whether it succeeded, its stdout and its stderr.
fn run_to_end(cmd: &mut Command, limit: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (mut out, mut err) = (String::new(), String::new());
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), out, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The environment of a function binary served by the emulator.
fn function(exe: impl AsRef<std::ffi::OsStr>, name: &str, port: u16) -> Command {
    let mut cmd = Command::new(exe);
    for (var, _) in std::env::vars() {
        if var.starts_with("DEDUP_") || var.starts_with("AWS_LAMBDA_") || var == "DEMO_LEDGER" {
            cmd.env_remove(var);
        }
    }
    cmd.env(
        "AWS_LAMBDA_RUNTIME_API",
        format!("http://127.0.0.1:{port}/.rt/{name}"),
    )
    .env("AWS_LAMBDA_FUNCTION_NAME", name)
    .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
    .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
    .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
    .env(
        "AWS_LAMBDA_LOG_LEVEL",
        std::env::var("DEDUP_E2E_LOG_LEVEL").unwrap_or_else(|_| "INFO".into()),
    )
    .env("AWS_ACCESS_KEY_ID", "test")
    .env("AWS_SECRET_ACCESS_KEY", "test")
    .env("AWS_REGION", "us-east-1");
    cmd
}

#[test]
#[ignore = "needs cargo-lambda: scripts/test installs it and runs this test"]
fn retry_pairs_of_every_entry_point_through_cargo_lambda_watch_charge_once() {
    let cargo_lambda = cargo_lambda().unwrap_or_else(|| {
        panic!(
            "cargo-lambda is not on PATH and CARGO_LAMBDA is not set: run scripts/test, which \
             installs it, or `python3 -m venv /tmp/venv-lambda && /tmp/venv-lambda/bin/pip install \
             cargo-lambda==1.9.2` and put /tmp/venv-lambda/bin on PATH"
        )
    });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Logs and the ledger live outside the crate: the watcher must never see them change.
    let dir = tempfile::tempdir().unwrap();
    let (watch_log, tool_log, dedup_log) = (
        dir.path().join("watch.log"),
        dir.path().join("demo-tool.log"),
        dir.path().join("toolcall-dedup.log"),
    );
    let ledger = dir.path().join("ledger.jsonl");
    let _dump = DumpOnPanic(vec![watch_log.clone(), tool_log.clone(), dedup_log.clone()]);
    let port = free_port();

    let mut watch = Proc::spawn(
        "cargo lambda watch",
        Command::new(&cargo_lambda)
            .args([
                "lambda",
                "watch",
                "--only-lambda-apis",
                "--ignore-changes",
                "-A",
                "127.0.0.1",
                "-P",
            ])
            .arg(port.to_string())
            .current_dir(root),
        &watch_log,
    );
    wait_for_port(port, &mut watch, &watch_log);

    let runtime_api = Relay::RuntimeApi.start(port);
    let mut tool = Proc::spawn(
        "demo-tool",
        function(demo_tool_binary(), "demo-tool", runtime_api).env("DEMO_LEDGER", &ledger),
        &tool_log,
    );
    let mut executor_cmd = function(
        env!("CARGO_BIN_EXE_toolcall-dedup"),
        "toolcall-dedup",
        runtime_api,
    );
    executor_cmd
        .env("DEDUP_ROUTES", r#"{"*":"demo-tool"}"#)
        .env(
            "DEDUP_LAMBDA_ENDPOINT",
            format!("http://127.0.0.1:{}", Relay::InvokeApi.start(port)),
        )
        .env("DEDUP_LOG_CALLS", "hashes");
    match std::env::var("DEDUP_TEST_MOTO_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())
    {
        Some(endpoint) => {
            let table = format!("dedup-e2e-{}", uuid::Uuid::new_v4().simple());
            let cfg = toolcall_dedup::store::DynamoDbConfig::new(&table);
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime
                .block_on(toolcall_dedup::store::table::create_table(
                    Some(&endpoint),
                    &cfg,
                ))
                .expect("create the e2e table on moto");
            executor_cmd
                .env("DEDUP_TABLE_NAME", &table)
                .env("DEDUP_DYNAMODB_ENDPOINT", &endpoint);
        }
        None => {
            eprintln!("DEDUP_TEST_MOTO_ENDPOINT is not set: the executor uses the in-memory store");
            executor_cmd
                .env("DEDUP_STORE", "memory")
                .env("DEDUP_ALLOW_MEMORY_STORE", "true");
        }
    }
    let mut executor = Proc::spawn("toolcall-dedup", &mut executor_cmd, &dedup_log);

    let invoke = |file: &str| -> Value {
        let mut cmd = Command::new(&cargo_lambda);
        cmd.args(["lambda", "invoke", "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args(["toolcall-dedup", "--data-file"])
            .arg(root.join("events").join(file))
            .current_dir(root);
        // An AgentCore event's client context sits beside it, as the Gateway would send it.
        // `--client-context-ascii` sends the JSON in the header the emulator reads (see Relay).
        let context = root
            .join("events")
            .join(file.replace(".json", ".client-context.json"));
        if context.is_file() {
            let json = std::fs::read_to_string(&context).unwrap();
            cmd.arg("--client-context-ascii").arg(json.trim());
        }
        let out = run(&mut cmd, Duration::from_secs(60));
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{file}: not JSON ({e}): {out}"))
    };
    let first = invoke("fd-charge_card.json");
    tool.assert_running(&tool_log);
    executor.assert_running(&dedup_log);
    let retry = invoke("fd-charge_card-retry.json");
    assert_eq!(first, retry, "the retry must get the stored response");
    assert!(
        first["response"]["functionResponse"]
            .get("responseState")
            .is_none(),
        "{first}"
    );
    let receipt: Value = serde_json::from_str(
        first["response"]["functionResponse"]["responseBody"]["TEXT"]["body"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(
        receipt["receipt_id"].as_str().unwrap().starts_with("ch_"),
        "{receipt}"
    );

    let entries = toolcall_dedup::stand_ins::demo::read_ledger(&ledger).unwrap();
    let charges: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "charge").collect();
    assert_eq!(
        charges.len(),
        1,
        "exactly one charge in the ledger: {entries:?}"
    );
    assert_eq!(charges[0]["receipt_id"], receipt["receipt_id"]);
    assert_eq!(
        charges[0]["dedup_key"].as_str().map(str::len),
        Some(32),
        "the tool got the dedup key"
    );

    // A deliberate repeat (a new caller step) is a second charge.
    invoke("fd-charge_card-step3.json");
    invoke("fd-charge_card-step4.json");
    let entries = toolcall_dedup::stand_ins::demo::read_ledger(&ledger).unwrap();
    assert_eq!(entries.iter().filter(|e| e["kind"] == "charge").count(), 3);

    // AgentCore Gateway: the arguments as the event, the tool in the client context. The tool's
    // reply (the receipt object itself) is the answer, and the retry gets it byte for byte.
    let first = invoke("agentcore/charge_card.json");
    let retry = invoke("agentcore/charge_card-retry.json");
    assert_eq!(
        first, retry,
        "the AgentCore retry must get the stored reply"
    );
    assert!(
        first["receipt_id"].as_str().unwrap().starts_with("ch_"),
        "{first}"
    );
    let entries = toolcall_dedup::stand_ins::demo::read_ledger(&ledger).unwrap();
    let last = entries.last().unwrap();
    assert_eq!(entries.iter().filter(|e| e["kind"] == "charge").count(), 4);
    assert_eq!(last["receipt_id"], first["receipt_id"]);
    assert_eq!(
        last["session_id"], "agentcore-session-7f3a",
        "the tool got the client context"
    );
    assert_eq!(last["dedup_key"].as_str().map(str::len), Some(32));

    // The invoke envelope: the answer wraps the reply and says what happened.
    let first = invoke("envelope/charge_card.json");
    let retry = invoke("envelope/charge_card-retry.json");
    assert_eq!(first["dedup"]["outcome"], "executed", "{first}");
    assert_eq!(retry["dedup"]["outcome"], "replayed", "{retry}");
    assert_eq!(first["result"], retry["result"]);
    assert_eq!(first["dedup"]["key"], retry["dedup"]["key"]);
    let entries = toolcall_dedup::stand_ins::demo::read_ledger(&ledger).unwrap();
    assert_eq!(entries.iter().filter(|e| e["kind"] == "charge").count(), 5);
    let bad = invoke("envelope/bad-no-run-id.json");
    assert_eq!(bad["error"]["type"], "invalid_event", "{bad}");

    // The executor wrote its per-invocation EMF line and the tool-call log to stdout.
    let log = std::fs::read_to_string(&dedup_log).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let emf: Vec<&Value> = lines.iter().filter(|l| l.get("_aws").is_some()).collect();
    assert_eq!(emf.len(), 9, "{log}");
    runbook_queries_name_fields_the_function_writes(&lines, root);
    assert_eq!(
        emf.iter().filter(|l| l["replayed"] == 1).count(),
        3,
        "{log}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.get("dedup_call").is_some())
            .count(),
        8,
        "{log}"
    );
    assert!(
        !log.contains("cus_8842"),
        "argument values leaked into the executor's log"
    );

    // The Gateway interceptor door. This test plays the Gateway: REQUEST to the executor; on a
    // pass-through, the call goes to the real demo tool (as a Lambda target would get it); then
    // RESPONSE to the executor with the tool's answer. The retry's REQUEST is answered from the
    // store under its own JSON-RPC id, and the tool is not called again.
    let invoke_with = |function: &str, data: &Value, context: Option<&str>| -> Value {
        let mut cmd = Command::new(&cargo_lambda);
        cmd.args(["lambda", "invoke", "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args([function, "--data-ascii"])
            .arg(data.to_string())
            .current_dir(root);
        if let Some(json) = context {
            cmd.arg("--client-context-ascii").arg(json);
        }
        let out = run(&mut cmd, Duration::from_secs(60));
        serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{function}: not JSON ({e}): {out}"))
    };
    let gateway_context =
        std::fs::read_to_string(root.join("events/agentcore/charge_card.client-context.json"))
            .unwrap();
    let call_through_gateway = |file: &str| -> Value {
        let request = invoke(&format!("agentcore-interceptor/{file}"));
        let Some(passed) = request["mcp"].get("transformedGatewayRequest") else {
            return request["mcp"]["transformedGatewayResponse"]["body"].clone();
        };
        let mut seen = crate::fixture::event(&format!("agentcore-interceptor/{file}"));
        let arguments = passed["body"]["params"]["arguments"].clone();
        let reply = invoke_with("demo-tool", &arguments, Some(gateway_context.trim()));
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": passed["body"]["id"],
            "result": {"content": [{"type": "text", "text": reply.to_string()}], "isError": false},
        });
        seen["mcp"]["gatewayResponse"] = serde_json::json!({"statusCode": 200, "body": body});
        let response = invoke_with("toolcall-dedup", &seen, None);
        assert_eq!(
            response["mcp"]["transformedGatewayResponse"]["body"], body,
            "{response}"
        );
        body
    };
    let charges_before = toolcall_dedup::stand_ins::demo::read_ledger(&ledger)
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "charge")
        .count();
    let first = call_through_gateway("charge_card.request.json");
    let retry = call_through_gateway("charge_card-retry.request.json");
    assert_eq!(
        (first["id"].clone(), retry["id"].clone()),
        (11.into(), 12.into())
    );
    let mut replayed = retry["result"].clone();
    let marker = replayed["_meta"]
        .as_object_mut()
        .and_then(|m| m.remove("toolcall-dedup/dedup"));
    assert_eq!(
        marker.map(|m| m["outcome"].clone()),
        Some("replayed".into()),
        "a replay is marked in its _meta"
    );
    replayed.as_object_mut().unwrap().remove("_meta");
    assert_eq!(
        first["result"], replayed,
        "the retry gets the stored result"
    );
    let entries = toolcall_dedup::stand_ins::demo::read_ledger(&ledger).unwrap();
    assert_eq!(
        entries.iter().filter(|e| e["kind"] == "charge").count(),
        charges_before + 1,
        "one charge for the interceptor pair: {entries:?}"
    );

    // The shapes AWS documents, through the real runtime (events/README.md cites the pages): an
    // HTTP target's interceptor payload and an unknown input version pass on, never a Lambda
    // error; the Lambda-target door takes the documented client context (six keys, `env` null).
    for file in ["http-runtime.request.json", "http-runtime.response.json"] {
        let passed = invoke(&format!("agentcore-interceptor/{file}"));
        assert_eq!(
            passed,
            serde_json::json!({"interceptorOutputVersion": "1.0", "http": {}}),
            "{file}"
        );
    }
    let future = invoke("agentcore-interceptor/future-version.request.json");
    assert!(
        future["mcp"].get("transformedGatewayRequest").is_some(),
        "{future}"
    );
    let first = invoke("agentcore/charge_card-documented-context.json");
    let again = invoke("agentcore/charge_card-documented-context.json");
    assert!(first["receipt_id"].is_string(), "{first}");
    assert_eq!(first, again, "the repeat is answered from the store");
    executor.assert_running(&dedup_log);

    // Client contexts `lambda_runtime` 1.5 cannot parse (it exits, posting nothing; issue 51):
    // each invocation is answered, a result or a Lambda error, and the process keeps serving.
    let custom: Value = serde_json::from_str(gateway_context.trim()).unwrap();
    let custom = &custom["custom"];
    let mut numeric_tool = custom.clone();
    numeric_tool["bedrockAgentCoreToolName"] = 5.into();
    let arguments = crate::fixture::event("agentcore/charge_card.json");
    for (context, processed) in [
        (
            serde_json::json!({"client": null, "custom": custom, "environment": null}),
            true,
        ),
        (
            serde_json::json!({"client": {}, "custom": null, "environment": null}),
            false,
        ),
        (serde_json::json!({"custom": numeric_tool}), false),
        (
            serde_json::json!({"custom": {"bedrockAgentCoreToolName": null}}),
            false,
        ),
    ] {
        let mut cmd = Command::new(&cargo_lambda);
        cmd.args(["lambda", "invoke", "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args(["toolcall-dedup", "--data-ascii"])
            .arg(arguments.to_string())
            .arg("--client-context-ascii")
            .arg(context.to_string())
            .current_dir(root);
        let ledger_before = toolcall_dedup::stand_ins::demo::read_ledger(&ledger)
            .unwrap()
            .len();
        // A process that exits leaves the invoke unanswered: it would hang to the limit.
        let (succeeded, out, err) = run_to_end(&mut cmd, Duration::from_secs(60));
        if processed {
            assert!(succeeded, "{context}: {out}{err}");
            assert!(out.contains("receipt_id"), "{context}: {out}{err}");
        } else {
            // Refused in the Lambda error format: no door can answer bare arguments, and a
            // numeric tool name is no tool name.
            assert!(!succeeded, "{context}: {out}{err}");
            assert!(
                err.contains("InvalidEvent") || out.contains("InvalidEvent"),
                "{context}: {out}{err}"
            );
        }
        if !processed {
            let ledger_after = toolcall_dedup::stand_ins::demo::read_ledger(&ledger)
                .unwrap()
                .len();
            assert_eq!(
                ledger_after, ledger_before,
                "{context}: the tool must not run"
            );
        }
        executor.assert_running(&dedup_log);
    }
    let after = invoke("agentcore/charge_card-documented-context.json");
    assert_eq!(
        first, after,
        "the function still serves after the odd contexts"
    );
}

/// Issue 53: every field a Logs Insights query of docs/operations.md filters on is one the
/// function's JSON lines have (a query on `message` finds nothing where the line says
/// `fields.message`), and every message it looks for is one a line holds.
fn runbook_queries_name_fields_the_function_writes(lines: &[Value], root: &Path) {
    let doc = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let section = doc.split("## Logs Insights").nth(1).unwrap();
    let block = section.split("```").nth(1).unwrap();
    let term = regex::Regex::new(
        r#"ispresent\(([\w.@]+)\)|([\w.@]+)\s*(?:=\s*"([^"]*)"|=\s*[\w.]+|like\s*/[^/]*/)"#,
    )
    .unwrap();
    let at = |line: &Value, path: &str| {
        path.split('.')
            .try_fold(line, |v, part| v.get(part))
            .cloned()
    };
    let filters: Vec<&str> = block
        .lines()
        .filter(|l| l.trim_start().starts_with("filter "))
        .collect();
    assert!(filters.len() >= 5, "{block}");
    for filter in filters {
        for c in term.captures_iter(filter) {
            let path = c.get(1).or(c.get(2)).unwrap().as_str();
            if path == "and" || path.starts_with('@') {
                continue;
            }
            assert!(
                lines.iter().any(|l| at(l, path).is_some()),
                "the runbook query `{filter}` filters on {path}, which no line the function wrote has"
            );
            // A message is the function's own words; other values depend on what happened.
            if let Some(text) = c
                .get(3)
                .map(|m| m.as_str())
                .filter(|_| path.ends_with("message"))
            {
                assert!(
                    lines
                        .iter()
                        .any(|l| at(l, path).as_ref().and_then(Value::as_str) == Some(text)),
                    "the runbook query `{filter}` looks for {path} = {text:?}, which no line has"
                );
            }
        }
    }
}
