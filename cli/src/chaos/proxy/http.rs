//! Reading and taking apart the HTTP/1.x messages the proxy passes between the SDK and the
//! server.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The `X-Amz-Target` operation of a request (`PutItem`, ...).
pub(super) fn target(request: &[u8]) -> String {
    let head_end = find(request, b"\r\n\r\n").unwrap_or(request.len());
    String::from_utf8_lossy(&request[..head_end])
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-amz-target")
                .then(|| value.trim().rsplit('.').next().unwrap_or("").to_string())
        })
        .unwrap_or_default()
}

/// A message's head (through the blank line) and body.
pub(super) fn split(message: &[u8]) -> (&[u8], &[u8]) {
    let head_end = find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 4);
    message.split_at(head_end)
}

/// `head` with its `Content-Length` set to `length` (added when it has none).
pub(super) fn with_content_length(head: &[u8], length: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<String> = text
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        })
        .map(str::to_string)
        .collect();
    lines.push(format!("Content-Length: {length}"));
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Message {
    Request,
    Response,
}

/// Reads one HTTP/1.x message (head plus `Content-Length` body). `Ok(None)` on a clean close
/// before the first byte. A response without `Content-Length` runs to the end of the stream.
pub(super) async fn read_message(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    kind: Message,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(buffer, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match (length, kind) {
        (Some(length), _) => {
            while buffer.len() < head_end + length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            let message = buffer[..head_end + length].to_vec();
            buffer.drain(..head_end + length);
            Ok(Some(message))
        }
        (None, Message::Request) => {
            let message = buffer[..head_end].to_vec();
            buffer.drain(..head_end);
            Ok(Some(message))
        }
        (None, Message::Response) => {
            stream.read_to_end(buffer).await?;
            Ok(Some(std::mem::take(buffer)))
        }
    }
}

pub(super) fn closes(response: &[u8]) -> bool {
    let head_end = find(response, b"\r\n\r\n").unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
    head.starts_with("http/1.0") || head.contains("\r\nconnection: close")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
