//! The proxy end to end: a fake server behind it, requests sent through it, and what each fault
//! and window does to the answer and to the write log.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::http::{Message, read_message, split};
use super::{AccessError, FaultProxy, RequestFaults, StoreFault};

/// A fake server: answers every request on a connection with `answer`.
async fn upstream(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                while let Ok(Some(_)) =
                    read_message(&mut stream, &mut buffer, Message::Request).await
                {
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
const REQUEST: &[u8] = b"POST / HTTP/1.1\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\n\
    Content-Length: 2\r\n\r\n{}";

/// Sends one request through the proxy; the raw answer (one message, or what came before the
/// connection closed).
async fn send(proxy: &FaultProxy) -> std::io::Result<Vec<u8>> {
    send_request(proxy, REQUEST).await
}

async fn send_request(proxy: &FaultProxy, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let addr = proxy.url().trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request).await?;
    let mut buffer = Vec::new();
    let read = read_message(&mut stream, &mut buffer, Message::Response);
    match tokio::time::timeout(Duration::from_secs(2), read).await {
        Ok(Ok(Some(answer))) => Ok(answer),
        Ok(Ok(None)) | Ok(Err(_)) | Err(_) => Ok(buffer),
    }
}

/// A write request with this body.
fn write(operation: &str, body: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nX-Amz-Target: DynamoDB_20120810.{operation}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn the_write_log_keeps_what_the_server_did_even_when_the_caller_got_a_fault() {
    const CONFLICT: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 68\r\n\r\n\
        {\"__type\":\"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailed\"}";
    let applies = FaultProxy::start(&upstream(OK).await, 7, "pk")
        .await
        .unwrap();
    applies.set_faults(RequestFaults {
        server_error: 1000,
        ..RequestFaults::NONE
    });
    let claim = r#"{"Item":{"pk":{"S":"k1"},"lease_token":{"S":"t1"}},
        "ExpressionAttributeValues":{":now_ms":{"N":"1234"}}}"#;
    for _ in 0..8 {
        send_request(&applies, &write("PutItem", claim))
            .await
            .unwrap();
    }
    let release = r#"{"Key":{"pk":{"S":"k1"}},"ExpressionAttributeValues":{":tok":{"S":"t1"}}}"#;
    let refused = FaultProxy::start(&upstream(CONFLICT).await, 7, "pk")
        .await
        .unwrap();
    send_request(&refused, &write("DeleteItem", release))
        .await
        .unwrap();
    send_request(&refused, REQUEST).await.unwrap();

    // Half the forms answer 5xx without forwarding (not logged: the server never saw them);
    // the other half replace the server's 200 after forwarding, which the log keeps.
    let claims = applies.writes().of("k1");
    assert!(!claims.is_empty() && claims.len() < 8, "{claims:?}");
    for seen in &claims {
        assert_eq!(seen.operation, "PutItem");
        assert_eq!(seen.token.as_deref(), Some("t1"));
        assert_eq!(seen.condition_now_ms, Some(1234));
        assert_eq!(seen.fault, Some("store_server_error"));
        assert!(seen.applied(), "{seen}");
    }
    let deletes = refused.writes().of("k1");
    assert_eq!(deletes.len(), 1, "a request without a key is not logged");
    assert_eq!(deletes[0].token.as_deref(), Some("t1"));
    assert!(!deletes[0].applied());
    let (_, status, error) = deletes[0].answered.clone().unwrap();
    assert_eq!((status, error.as_str()), (400, "ConditionalCheckFailed"));
}

#[tokio::test]
async fn a_refusal_window_refuses_connects_then_the_proxy_listens_again() {
    let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
        .await
        .unwrap();
    assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
    proxy.set_refusing(true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = send(&proxy).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    proxy.set_refusing(false);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
}

#[tokio::test]
async fn a_black_hole_window_lets_connects_hang_and_drops_requests_then_listens_again() {
    let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
        .await
        .unwrap();
    let addr = proxy.url().trim_start_matches("http://").to_string();
    // Served once, so the proxy has accepted it (closing the listening socket resets a
    // connection still in its accept queue).
    let mut open = TcpStream::connect(&addr).await.unwrap();
    open.write_all(REQUEST).await.unwrap();
    let mut buffer = Vec::new();
    let served = read_message(&mut open, &mut buffer, Message::Response).await;
    assert!(served.unwrap().unwrap().ends_with(b"{}"));
    proxy.set_blackholed(true);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let connect = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(&addr));
    assert!(
        connect.await.is_err(),
        "a connect neither succeeds nor is refused: it hangs"
    );
    open.write_all(&write("PutItem", r#"{"pk":{"S":"k"}}"#))
        .await
        .unwrap();
    let mut answer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_millis(300), open.read(&mut answer));
    assert!(
        read.await.is_err(),
        "a request on an open connection gets no answer"
    );
    proxy.set_blackholed(false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
    assert_eq!(
        proxy
            .variants()
            .get("store_connect_blackholed.requests_dropped"),
        Some(&1)
    );
}

#[tokio::test]
async fn an_access_window_answers_its_error_without_forwarding() {
    let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
        .await
        .unwrap();
    proxy.set_access_error(Some(AccessError::ExpiredToken));
    let answer = String::from_utf8(send(&proxy).await.unwrap()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("#ExpiredTokenException"), "{answer}");
    proxy.set_access_error(None);
    assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
    assert_eq!(proxy.counts()[&StoreFault::AccessOrTableError], 1);
}

/// Each access error is answered with its documented status and its code, which the SDK reads
/// from `__type` whatever the status.
#[tokio::test]
async fn every_access_error_is_answered_with_its_status_and_code() {
    let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
        .await
        .unwrap();
    for error in AccessError::ALL {
        proxy.set_access_error(Some(error));
        let answer = String::from_utf8(send(&proxy).await.unwrap()).unwrap();
        let canned = error.answer();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {} ", canned.status)),
            "{answer}"
        );
        assert!((400..500).contains(&canned.status), "{error:?}");
        assert!(answer.contains(&format!("#{}\"", error.name())), "{answer}");
    }
    assert_eq!(
        proxy.counts()[&StoreFault::AccessOrTableError],
        AccessError::ALL.len() as u64
    );
}

#[tokio::test]
async fn every_form_of_a_garbled_or_server_error_answer_is_what_it_says() {
    let proxy = FaultProxy::start(&upstream(OK).await, 7, "pk")
        .await
        .unwrap();
    proxy.set_faults(RequestFaults {
        garbled: 500,
        server_error: 500,
        ..RequestFaults::NONE
    });
    for _ in 0..40 {
        let before = proxy.variants();
        let answer = send(&proxy).await.unwrap();
        let after = proxy.variants();
        let form = after
            .iter()
            .find(|(k, v)| before.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .unwrap();
        let (head, body) = split(&answer, Message::Response);
        let head = String::from_utf8_lossy(head).to_string();
        match form.as_str() {
            "store_response_garbled.body_cut_short" => {
                assert!(head.contains("Content-Length: 2"), "{head}");
                assert_eq!(body, b"{");
            }
            "store_response_garbled.body_not_json" => {
                assert!(head.contains("Content-Length: 1"), "{head}");
                assert_eq!(body, b"{");
            }
            f if f.starts_with("store_server_error.500") => {
                assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
            }
            f if f.starts_with("store_server_error.503") => {
                assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
            }
            other => panic!("unexpected form {other}"),
        }
    }
    let forms = proxy.variants();
    assert_eq!(forms.len(), 6, "every form drawn: {forms:?}");
}
