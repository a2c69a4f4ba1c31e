//! A fake Lambda endpoint for the real `LambdaDispatcher` (the SDK's client on loopback): scripted
//! `Invoke` replies, `GetFunctionConfiguration` answers, and what it was sent.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One scripted reply of the fake Lambda: status, extra headers, body. Status 0 closes the
/// connection instead of answering: the invoke was delivered, its response is lost.
pub(crate) type FakeReply = (u16, Vec<(&'static str, &'static str)>, Vec<u8>);

/// A fake Lambda endpoint. `Invoke` requests get the next scripted reply and are recorded (function
/// name, payload); `GetFunctionConfiguration` requests get the configuration reply of their
/// function (404 for an unknown one) and are counted.
pub(crate) struct FakeLambda {
    pub(crate) url: String,
    pub(crate) seen: Arc<Mutex<Vec<(String, Value)>>>,
    pub(crate) configurations_read: Arc<AtomicU32>,
}

impl FakeLambda {
    pub(crate) async fn start(replies: Vec<FakeReply>) -> FakeLambda {
        FakeLambda::with_configurations(replies, Vec::new()).await
    }

    /// With `configurations`, and a 500 reply once the script is exhausted.
    pub(crate) async fn with_configurations(
        replies: Vec<FakeReply>,
        configurations: Vec<(&'static str, Value)>,
    ) -> FakeLambda {
        FakeLambda::scripted(replies, configurations, (500, vec![], b"{}".to_vec())).await
    }

    /// The functions invoked, in order.
    pub(crate) fn invoked(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(f, _)| f.clone())
            .collect()
    }

    /// `when_done` answers every invoke past the script (status 0: close the connection).
    pub(crate) async fn scripted(
        replies: Vec<FakeReply>,
        configurations: Vec<(&'static str, Value)>,
        when_done: FakeReply,
    ) -> FakeLambda {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let configurations_read = Arc::new(AtomicU32::new(0));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let configurations = Arc::new(configurations);
        tokio::spawn({
            let (seen, configurations_read) = (seen.clone(), configurations_read.clone());
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (seen, replies, when_done) =
                        (seen.clone(), replies.clone(), when_done.clone());
                    let (configurations, configurations_read) =
                        (configurations.clone(), configurations_read.clone());
                    tokio::spawn(async move {
                        let mut reader = BufReader::new(stream);
                        loop {
                            let mut request_line = String::new();
                            if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let mut length = 0usize;
                            loop {
                                let mut header = String::new();
                                if reader.read_line(&mut header).await.unwrap_or(0) == 0 {
                                    return;
                                }
                                if header.trim().is_empty() {
                                    break;
                                }
                                if let Some((name, value)) = header.split_once(':')
                                    && name.eq_ignore_ascii_case("content-length")
                                {
                                    length = value.trim().parse().unwrap();
                                }
                            }
                            let mut body = vec![0; length];
                            if reader.read_exact(&mut body).await.is_err() {
                                return;
                            }
                            let function = request_line
                                .split('/')
                                .nth(3)
                                .unwrap_or_default()
                                .to_string();
                            let (status, headers, payload) = if request_line.starts_with("GET ") {
                                configurations_read.fetch_add(1, Ordering::SeqCst);
                                match configurations.iter().find(|(f, _)| *f == function) {
                                    Some((_, conf)) => (200, vec![], conf.to_string().into_bytes()),
                                    None => (
                                        404,
                                        vec![("x-amzn-errortype", "ResourceNotFoundException")],
                                        br#"{"Type":"User","Message":"Function not found"}"#
                                            .to_vec(),
                                    ),
                                }
                            } else {
                                seen.lock().unwrap().push((
                                    function,
                                    serde_json::from_slice(&body).unwrap_or_default(),
                                ));
                                replies
                                    .lock()
                                    .unwrap()
                                    .pop_front()
                                    .unwrap_or_else(|| when_done.clone())
                            };
                            if status == 0 {
                                return;
                            }
                            let mut response = format!(
                                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n",
                                payload.len()
                            );
                            for (k, v) in headers {
                                response.push_str(&format!("{k}: {v}\r\n"));
                            }
                            response.push_str("content-type: application/json\r\n\r\n");
                            let stream = reader.get_mut();
                            if stream.write_all(response.as_bytes()).await.is_err()
                                || stream.write_all(&payload).await.is_err()
                            {
                                return;
                            }
                        }
                    });
                }
            }
        });
        FakeLambda {
            url,
            seen,
            configurations_read,
        }
    }
}
