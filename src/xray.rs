//! Traces: the handler's stages (`key`, `claim`, `invoke`, `complete`) as `tracing` spans, sent
//! to X-Ray as subsegments of the function's segment when Lambda tracing is on.
//!
//! With `Tracing: Active`, Lambda runs the X-Ray daemon beside the function
//! (`AWS_XRAY_DAEMON_ADDRESS`) and hands each invocation a trace header (`_X_AMZN_TRACE_ID`:
//! `Root=…;Parent=…;Sampled=1`), `Parent` being the function's own segment. A stage span that
//! closes in a sampled invocation becomes one subsegment document, sent over UDP in the daemon's
//! format: <https://docs.aws.amazon.com/xray/latest/devguide/xray-api-sendingdata.html>.
//! Nothing is sent for an unsampled invocation or without a daemon. A few dozen lines over UDP
//! instead of an OpenTelemetry pipeline: no collector layer, no exporter thread, no flush at the
//! end of each invocation, and nothing added to the cold start.

use std::net::{SocketAddr, UdpSocket};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::span::{Attributes, Id};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The spans sent as subsegments, by name: one call's stages in the order they happen.
pub(crate) const STAGES: [&str; 4] = ["key", "claim", "invoke", "complete"];

/// The daemon's header line, before every document.
const HEADER: &str = "{\"format\":\"json\",\"version\":1}\n";

/// Sends the stage spans of sampled invocations to the X-Ray daemon.
pub struct XrayLayer {
    socket: UdpSocket,
    daemon: SocketAddr,
    trace_header: fn() -> Option<String>,
}

impl XrayLayer {
    /// The layer for Lambda: the daemon at `AWS_XRAY_DAEMON_ADDRESS` and each invocation's
    /// `_X_AMZN_TRACE_ID`. `None` when there is no daemon (tracing off, or not in Lambda).
    pub fn from_env() -> Option<XrayLayer> {
        let address = std::env::var("AWS_XRAY_DAEMON_ADDRESS").ok()?;
        XrayLayer::new(daemon_address(&address)?, || {
            std::env::var("_X_AMZN_TRACE_ID").ok()
        })
        .ok()
    }

    /// Sends to `daemon`, reading each invocation's trace header from `trace_header`.
    pub fn new(
        daemon: SocketAddr,
        trace_header: fn() -> Option<String>,
    ) -> std::io::Result<XrayLayer> {
        let bind: SocketAddr = if daemon.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let socket = UdpSocket::bind(bind)?;
        // A full socket buffer drops a subsegment; it never holds up an invocation.
        socket.set_nonblocking(true)?;
        Ok(XrayLayer {
            socket,
            daemon,
            trace_header,
        })
    }

    fn is_stage(metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("toolcall_dedup") && STAGES.contains(&metadata.name())
    }
}

/// The UDP address in `AWS_XRAY_DAEMON_ADDRESS`: `host:port`, or `udp:host:port tcp:host:port`.
pub(crate) fn daemon_address(text: &str) -> Option<SocketAddr> {
    let udp = text
        .split_whitespace()
        .find_map(|part| part.strip_prefix("udp:"))
        .or_else(|| text.split_whitespace().next())?;
    udp.parse().ok()
}

/// The parts of a trace header a subsegment needs: only for a sampled invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceHeader {
    /// `Root`: the trace id.
    pub(crate) root: String,
    /// `Parent`: the function segment's id.
    pub(crate) parent: String,
}

impl TraceHeader {
    /// `Root=…;Parent=…;Sampled=1` read; `None` unless sampled and complete.
    pub(crate) fn parse(text: &str) -> Option<TraceHeader> {
        let (mut root, mut parent, mut sampled) = (None, None, false);
        for part in text.split(';') {
            match part.trim().split_once('=') {
                Some(("Root", v)) => root = Some(v),
                Some(("Parent", v)) => parent = Some(v),
                Some(("Sampled", v)) => sampled = v == "1",
                _ => {}
            }
        }
        let safe = |v: &str| v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        match (root, parent) {
            (Some(root), Some(parent)) if sampled && safe(root) && safe(parent) => {
                Some(TraceHeader {
                    root: root.to_string(),
                    parent: parent.to_string(),
                })
            }
            _ => None,
        }
    }
}

/// A stage span open in a sampled invocation.
struct Open {
    trace: TraceHeader,
    start: f64,
}

impl<S> Layer<S> for XrayLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !XrayLayer::is_stage(attrs.metadata()) {
            return;
        }
        let Some(trace) = (self.trace_header)()
            .as_deref()
            .and_then(TraceHeader::parse)
        else {
            return;
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open {
                trace,
                start: epoch_seconds(),
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let document = format!(
            "{HEADER}{{\"name\":\"{}\",\"id\":\"{:016x}\",\"trace_id\":\"{}\",\"parent_id\":\"{}\",\
             \"type\":\"subsegment\",\"start_time\":{:.6},\"end_time\":{:.6}}}",
            span.name(),
            fastrand::u64(..),
            open.trace.root,
            open.trace.parent,
            open.start,
            epoch_seconds(),
        );
        // Best effort, like every X-Ray SDK: a lost subsegment is a gap in a trace, nothing more.
        let _ = self.socket.send_to(document.as_bytes(), self.daemon);
    }
}

fn epoch_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The Lambda's subscriber: what `lambda_runtime::tracing::init_default_subscriber` sets up (the
/// log level from `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`, JSON lines under
/// `AWS_LAMBDA_LOG_FORMAT=JSON`), plus [`XrayLayer`] when Lambda tracing is on. The level filters
/// the log lines only: the stage spans reach X-Ray at any level.
pub fn init_lambda_subscriber() {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::{LevelFilter, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|l| l.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let filter = EnvFilter::builder()
        .with_default_directive(level.into())
        .from_env_lossy();
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let logs = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time();
    let logs = if json {
        logs.json().with_filter(filter).boxed()
    } else {
        logs.with_filter(filter).boxed()
    };
    let xray = XrayLayer::from_env().map(|layer| layer.with_filter(filter_fn(XrayLayer::is_stage)));
    tracing_subscriber::registry().with(logs).with(xray).init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_headers_are_read_only_when_sampled() {
        let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        assert_eq!(
            TraceHeader::parse(header),
            Some(TraceHeader {
                root: "1-5759e988-bd862e3fe1be46a994272793".into(),
                parent: "53995c3f42cd8ad8".into(),
            })
        );
        assert_eq!(
            TraceHeader::parse(&header.replace("Sampled=1", "Sampled=0")),
            None
        );
        assert_eq!(
            TraceHeader::parse("Root=1-5759e988-bd862e3f;Sampled=1"),
            None
        );
        assert_eq!(
            TraceHeader::parse("Root=1-\"x;Parent=5;Sampled=1"),
            None,
            "no JSON injection"
        );
    }

    #[test]
    fn the_daemon_address_is_read_in_both_forms() {
        assert_eq!(
            daemon_address("169.254.79.129:2000"),
            "169.254.79.129:2000".parse().ok()
        );
        assert_eq!(
            daemon_address("tcp:127.0.0.1:2000 udp:127.0.0.2:2001"),
            "127.0.0.2:2001".parse().ok()
        );
        assert_eq!(daemon_address(""), None);
    }
}
