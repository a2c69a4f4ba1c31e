//! One client connection, request by request: the fault each request draws (or an armed keyed
//! rule or a window imposes), and what the proxy then does with the request and its answer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::answers::*;
use super::http::{Message, closes, read_message, split, target, with_content_length};
use super::keyed::{InFlight, KeyedFault};
use super::write_log::is_write;
use super::{Cut, RequestFaults, Shared, StoreFault};

/// What the proxy does with one request.
enum Action {
    /// Close the connection without forwarding.
    Close,
    /// Close the connection, and deliver the request later.
    Late,
    /// Answer without forwarding.
    Answer(Canned),
    /// Forward, then treat the answer so.
    Forward(After),
}

/// What happens to a forwarded request's answer.
enum After {
    Pass,
    /// Thrown away, the connection closed.
    Drop,
    /// Held this long, then passed on.
    Hold(Duration),
    /// Replaced by this answer.
    Replace(Canned),
    /// Head and half the body sent, then the connection closed.
    CutShort,
    /// The body replaced by its first half (not JSON), `Content-Length` to match.
    NotJson,
    /// Head and half the body sent; the connection stalls this long, then closes.
    Stall(Duration),
}

/// The action for a request hit by `fault` (`variant` picks among its forms) and the name of the
/// form, for the counts.
fn action(
    fault: Option<StoreFault>,
    variant: u32,
    faults: &RequestFaults,
) -> (Action, Option<&'static str>) {
    let Some(fault) = fault else {
        return (Action::Forward(After::Pass), None);
    };
    match fault {
        StoreFault::DropBeforeForward => (Action::Close, None),
        StoreFault::DeliverLate => (Action::Late, None),
        StoreFault::DropAfterForward | StoreFault::KeyedAnswerDropped => {
            (Action::Forward(After::Drop), None)
        }
        StoreFault::DelayPastTimeout | StoreFault::KeyedAnswerHeld => {
            (Action::Forward(After::Hold(faults.delay_by)), None)
        }
        StoreFault::ThrottleProvisioned => (Action::Answer(PROVISIONED_THROUGHPUT), None),
        StoreFault::ThrottleRate => (Action::Answer(THROTTLING), None),
        StoreFault::ThrottleRequestLimit => (Action::Answer(REQUEST_LIMIT_EXCEEDED), None),
        StoreFault::ServerError => match variant % 4 {
            0 => (
                Action::Answer(INTERNAL_SERVER_ERROR),
                Some("500_before_forward"),
            ),
            1 => (
                Action::Answer(SERVICE_UNAVAILABLE),
                Some("503_before_forward"),
            ),
            2 => (
                Action::Forward(After::Replace(INTERNAL_SERVER_ERROR)),
                Some("500_after_forward"),
            ),
            _ => (
                Action::Forward(After::Replace(SERVICE_UNAVAILABLE)),
                Some("503_after_forward"),
            ),
        },
        StoreFault::WriteConflict => match variant % 2 {
            0 => (
                Action::Answer(TRANSACTION_CONFLICT),
                Some("TransactionConflictException"),
            ),
            _ => (
                Action::Answer(REPLICATED_WRITE_CONFLICT),
                Some("ReplicatedWriteConflictException"),
            ),
        },
        StoreFault::RequestTimeout => (Action::Answer(REQUEST_TIMEOUT), None),
        StoreFault::ItemTooLarge | StoreFault::ItemTooLargeOnClaim => {
            (Action::Answer(ITEM_TOO_LARGE), None)
        }
        StoreFault::ResponseGarbled => match variant % 2 {
            0 => (Action::Forward(After::CutShort), Some("body_cut_short")),
            _ => (Action::Forward(After::NotJson), Some("body_not_json")),
        },
        StoreFault::BodyStalled => (Action::Forward(After::Stall(faults.stall_for)), None),
        // Not drawn per request.
        StoreFault::OutageRefused | StoreFault::AccessOrTableError => {
            (Action::Forward(After::Pass), None)
        }
    }
}

/// One client connection: request by request until either side closes, a fault closes it, or a
/// cut (outage, refusal, access window) closes it.
pub(super) async fn serve(shared: Arc<Shared>, mut inbound: TcpStream) {
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let mut buffer = Vec::new();
    loop {
        let request = tokio::select! {
            r = read_message(&mut inbound, &mut buffer, Message::Request) => r,
            _ = cut.changed() => { shared.count_cut(cut.borrow().1); return; }
        };
        let Ok(Some(request)) = request else { return };
        if !answer(&shared, &mut inbound, &mut cut, request).await {
            return;
        }
    }
}

/// Does with one request what a window, an armed rule or the random draw says; `false` when the
/// connection is to close.
async fn answer(
    shared: &Arc<Shared>,
    inbound: &mut TcpStream,
    cut: &mut watch::Receiver<(u32, Cut)>,
    request: Vec<u8>,
) -> bool {
    if shared.blackholed.load(Ordering::SeqCst) {
        shared.count_named("store_connect_blackholed.requests_dropped");
        hold_while_blackholed(shared).await;
        return false;
    }
    let target = target(&request);
    let access_error = *shared
        .access_error
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(error) = access_error {
        shared.count(StoreFault::AccessOrTableError);
        shared.count_variant(StoreFault::AccessOrTableError, error.name());
        return inbound.write_all(&error.answer().bytes()).await.is_ok();
    }
    let Hit {
        fault,
        variant,
        faults,
        in_flight,
    } = hit(shared, &request, &target);
    let (action, form) = action(fault, variant, &faults);
    if let Some(fault) = fault {
        shared.count(fault);
        if let Some(form) = form {
            shared.count_variant(fault, form);
        }
    }
    let after = match action {
        Action::Close => return false,
        Action::Late => {
            let late_by = faults.late_by.mul_f64(fastrand::f64());
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(late_by).await;
                let _ = forward(&shared, &request, &target, fault).await;
            });
            return false;
        }
        Action::Answer(canned) => {
            drop(in_flight);
            return inbound.write_all(&canned.bytes()).await.is_ok();
        }
        Action::Forward(after) => after,
    };
    // Its own task, so that cutting the caller's connection does not unsend the request: the
    // server may have it, and applies it whenever it gets to it (a paused server on resuming). It
    // counts as in flight until the server answers.
    let mut forwarded = tokio::spawn({
        let shared = shared.clone();
        async move {
            let response = forward(&shared, &request, &target, fault).await;
            drop(in_flight);
            response
        }
    });
    let response = tokio::select! {
        r = &mut forwarded => r.ok().flatten(),
        _ = cut.changed() => { shared.count_cut(cut.borrow().1); return false; }
    };
    let Some(response) = response else {
        return false;
    };
    if shared.blackholed.load(Ordering::SeqCst) {
        shared.count_named("store_connect_blackholed.answers_dropped");
        hold_while_blackholed(shared).await;
        return false;
    }
    pass_on(inbound, cut, &response, after).await
}

/// The fault that hits one request, with the roll that picks its form and the settings in force.
struct Hit {
    fault: Option<StoreFault>,
    variant: u32,
    faults: RequestFaults,
    /// Counts a request an armed rule hit as in flight until the server answers it.
    in_flight: Option<InFlight>,
}

/// An armed rule's fault takes the place of the random draw.
fn hit(shared: &Shared, request: &[u8], target: &str) -> Hit {
    let Some((keyed, flight)) = shared.keyed.matching(request, target) else {
        let (fault, variant, faults) = shared.draw();
        // A write conflict is a write's answer: a read it falls on goes through.
        let fault = fault.filter(|f| *f != StoreFault::WriteConflict || is_write(target));
        return Hit {
            fault,
            variant,
            faults,
            in_flight: None,
        };
    };
    let (fault, faults) = match keyed {
        KeyedFault::Hold(by) => (
            StoreFault::KeyedAnswerHeld,
            RequestFaults {
                delay_by: by,
                ..RequestFaults::NONE
            },
        ),
        KeyedFault::Drop => (StoreFault::KeyedAnswerDropped, RequestFaults::NONE),
        KeyedFault::ItemTooLarge if target == "PutItem" => {
            (StoreFault::ItemTooLargeOnClaim, RequestFaults::NONE)
        }
        KeyedFault::ItemTooLarge => (StoreFault::ItemTooLarge, RequestFaults::NONE),
    };
    Hit {
        fault: Some(fault),
        variant: 0,
        faults,
        in_flight: Some(InFlight(flight)),
    }
}

/// Sends the server's `response` to the caller as `after` says; `false` when the connection is to
/// close.
async fn pass_on(
    inbound: &mut TcpStream,
    cut: &mut watch::Receiver<(u32, Cut)>,
    response: &[u8],
    after: After,
) -> bool {
    let (head, body) = split(response, Message::Response);
    // An empty body is declared one byte long, so that something is still missing.
    let head_of_half = || {
        if body.is_empty() {
            with_content_length(head, 1)
        } else {
            head.to_vec()
        }
    };
    match after {
        After::Pass => {}
        After::Drop => return false,
        After::Hold(by) => {
            tokio::select! {
                _ = tokio::time::sleep(by) => {}
                _ = cut.changed() => return false,
            }
        }
        After::Replace(canned) => return inbound.write_all(&canned.bytes()).await.is_ok(),
        After::CutShort => {
            let _ = inbound.write_all(&head_of_half()).await;
            let _ = inbound.write_all(&body[..body.len() / 2]).await;
            return false;
        }
        After::NotJson => {
            let half = &body[..body.len() / 2];
            let garbled: &[u8] = if half.is_empty() { b"<" } else { half };
            let mut answer = with_content_length(head, garbled.len());
            answer.extend_from_slice(garbled);
            return inbound.write_all(&answer).await.is_ok() && !closes(response);
        }
        After::Stall(by) => {
            if inbound.write_all(&head_of_half()).await.is_ok()
                && inbound.write_all(&body[..body.len() / 2]).await.is_ok()
            {
                let _ = inbound.flush().await;
                tokio::select! {
                    _ = tokio::time::sleep(by) => {}
                    _ = cut.changed() => {}
                }
            }
            return false;
        }
    }
    // moto answers HTTP/1.0 with `Connection: close`: pass the close on.
    inbound.write_all(response).await.is_ok() && !closes(response)
}

/// Keeps a connection silent until the black-hole window ends (its caller gives up first).
async fn hold_while_blackholed(shared: &Shared) {
    while shared.blackholed.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `request` to the server on a fresh connection and reads its answer, noting a write in
/// the [`WriteLog`].
async fn forward(
    shared: &Shared,
    request: &[u8],
    target: &str,
    fault: Option<StoreFault>,
) -> Option<Vec<u8>> {
    let sending = shared.writes.sending(request, target, fault);
    let mut outbound = TcpStream::connect(&shared.upstream).await.ok()?;
    outbound.write_all(request).await.ok()?;
    let response = read_message(&mut outbound, &mut Vec::new(), Message::Response)
        .await
        .ok()
        .flatten()?;
    if let Some(sending) = &sending {
        shared.writes.answered(sending, &response);
    }
    Some(response)
}
