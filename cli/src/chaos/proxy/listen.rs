//! The proxy's listening socket and its windows: open, closed (connects refused by the kernel)
//! or black-holed (connects hang), and the accept loop that switches between them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::serve::serve;
use super::{Shared, StoreFault};

/// How the proxy's listening socket takes connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listening {
    Open,
    /// Closed: connects are refused by the kernel.
    Refusing,
    /// Black-holed: a socket whose accept queue is full, so the kernel drops every SYN and a
    /// connect hangs until the caller's timeout; requests on open connections get no answer.
    Blackholed,
}

/// Ports below the kernel's ephemeral range (32768-60999 on Linux), where no outgoing connection
/// takes the proxy's port while its listener is closed, and a connect to it cannot connect to itself.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A listener on a free loopback port (outside the ephemeral range when one is free).
pub(super) async fn listen() -> std::io::Result<TcpListener> {
    for _ in 0..100 {
        let port = fastrand::u16(PORTS);
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return Ok(listener);
        }
    }
    TcpListener::bind("127.0.0.1:0").await
}

/// Accepts connections; while refusing, the listening socket is closed (connects are refused by
/// the kernel), while black-holed it is replaced by one that drops every connect; it is opened
/// again on the same address after.
pub(super) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    mut modes: watch::Receiver<Listening>,
) {
    let mut listener = Some(listener);
    loop {
        let mode = *modes.borrow_and_update();
        if mode != Listening::Open {
            listener = None;
            let _hole = match mode {
                Listening::Blackholed => Some(BlackHole::open(addr).await),
                _ => None,
            };
            if modes.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Some(open) = &listener else {
            listener = Some(relisten(addr).await);
            continue;
        };
        tokio::select! {
            accepted = open.accept() => {
                let Ok((inbound, _)) = accepted else { return };
                if shared.outage.load(Ordering::SeqCst) {
                    shared.count(StoreFault::OutageRefused);
                    drop(inbound);
                    continue;
                }
                tokio::spawn(serve(shared.clone(), inbound));
            }
            changed = modes.changed() => if changed.is_err() { return },
        }
    }
}

/// A listening socket on the proxy's address that never accepts, with its one-place accept
/// queue filled by a connection of its own: Linux then drops every further SYN, so a connect
/// neither succeeds nor is refused (what a firewall's DROP rule does, without the privilege).
struct BlackHole {
    _listener: Option<TcpListener>,
    _filler: Option<TcpStream>,
}

impl BlackHole {
    async fn open(addr: SocketAddr) -> BlackHole {
        for _ in 0..50 {
            let socket = match tokio::net::TcpSocket::new_v4() {
                Ok(socket) => socket,
                Err(_) => break,
            };
            let _ = socket.set_reuseaddr(true);
            let Ok(listener) = socket.bind(addr).and_then(|()| socket.listen(0)) else {
                // The port is still taken by a closing connection: try again shortly.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let filler = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok);
            return BlackHole {
                _listener: Some(listener),
                _filler: filler,
            };
        }
        tracing::warn!(%addr, "the fault proxy could not open its black hole; connects are refused");
        BlackHole {
            _listener: None,
            _filler: None,
        }
    }
}

/// Listens on `addr` again, retrying while the port is still taken (a closing connection).
async fn relisten(addr: SocketAddr) -> TcpListener {
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => {
                tracing::debug!(%addr, error = %e, "the fault proxy cannot listen again yet");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
