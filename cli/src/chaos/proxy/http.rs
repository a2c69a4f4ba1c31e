//! Reading and taking apart the HTTP/1.x messages the proxy passes between the SDK and the
//! server. Heads are parsed by `httparse`; a body is as long as the head's `Content-Length` says
//! (a response without one runs to the end of the stream, a request without one has none).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The most headers a head may carry (the SDK's requests and the servers' answers carry about a
/// dozen); more is an error.
const MAX_HEADERS: usize = 64;

/// Which side of an exchange a message is: a request line and a status line parse apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Message {
    Request,
    Response,
}

/// A parsed head: what the proxy reads from it.
struct Head<'b> {
    /// Its length in bytes, through the blank line.
    len: usize,
    /// The minor version: `0` for HTTP/1.0, `1` for HTTP/1.1.
    version: u8,
    /// A response's status code and reason phrase.
    status: Option<(u16, &'b str)>,
    headers: Vec<httparse::Header<'b>>,
}

impl<'b> Head<'b> {
    /// The head at the start of `bytes`; `Ok(None)` while it is incomplete, an `InvalidData` error
    /// when it is not an HTTP/1.x head.
    fn parse(bytes: &'b [u8], kind: Message) -> io::Result<Option<Head<'b>>> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (parsed, version, status, count) = match kind {
            Message::Request => {
                let mut request = httparse::Request::new(&mut headers);
                let parsed = request.parse(bytes);
                (parsed, request.version, None, request.headers.len())
            }
            Message::Response => {
                let mut response = httparse::Response::new(&mut headers);
                let parsed = response.parse(bytes);
                let status = response.code.zip(response.reason);
                (parsed, response.version, status, response.headers.len())
            }
        };
        let malformed = |e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a malformed HTTP/1.x {kind:?} head: {e}"),
            )
        };
        match parsed.map_err(malformed)? {
            httparse::Status::Partial => Ok(None),
            httparse::Status::Complete(len) => Ok(Some(Head {
                len,
                version: version.unwrap_or(1),
                status,
                headers: headers[..count].to_vec(),
            })),
        }
    }

    /// The value of the header `name` (the first, when repeated).
    fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Its `Content-Length`; `None` when it has none or it is not a number.
    fn content_length(&self) -> Option<usize> {
        let value = std::str::from_utf8(self.header("content-length")?).ok()?;
        value.trim().parse().ok()
    }
}

/// Reads one HTTP/1.x message (head plus `Content-Length` body) from `stream`, after what
/// `buffer` holds already; bytes read past its end stay in `buffer` for the next call. `Ok(None)`
/// on a clean close before the first byte; `UnexpectedEof` on a close inside a message,
/// `InvalidData` on a head that is not HTTP/1.x. A response without `Content-Length` runs to the
/// end of the stream; a request without one has no body.
pub(super) async fn read_message(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    kind: Message,
) -> io::Result<Option<Vec<u8>>> {
    let (head_len, length) = loop {
        if let Some(head) = Head::parse(buffer, kind)? {
            break (head.len, head.content_length());
        }
        if !read_more(stream, buffer).await? {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    };
    let end = match (length, kind) {
        (Some(length), _) => head_len + length,
        (None, Message::Request) => head_len,
        (None, Message::Response) => {
            stream.read_to_end(buffer).await?;
            return Ok(Some(std::mem::take(buffer)));
        }
    };
    while buffer.len() < end {
        if !read_more(stream, buffer).await? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Some(buffer.drain(..end).collect()))
}

/// Appends what `stream` has next to `buffer`; `false` at the end of the stream.
async fn read_more(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
) -> io::Result<bool> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await?;
    buffer.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

/// A whole message's head (through the blank line) and body; all head when it does not parse.
pub(super) fn split(message: &[u8], kind: Message) -> (&[u8], &[u8]) {
    let head_len = Head::parse(message, kind)
        .ok()
        .flatten()
        .map_or(message.len(), |head| head.len);
    message.split_at(head_len)
}

/// The `X-Amz-Target` operation of a request (`PutItem`, ...); empty when it has none.
pub(super) fn target(request: &[u8]) -> String {
    Head::parse(request, Message::Request)
        .ok()
        .flatten()
        .and_then(|head| head.header("x-amz-target"))
        .map(|value| {
            let value = String::from_utf8_lossy(value);
            value.trim().rsplit('.').next().unwrap_or("").to_string()
        })
        .unwrap_or_default()
}

/// A response's status code; `0` when it does not parse.
pub(super) fn status(response: &[u8]) -> u16 {
    Head::parse(response, Message::Response)
        .ok()
        .flatten()
        .and_then(|head| head.status)
        .map_or(0, |(code, _)| code)
}

/// The server closes the connection after this response: HTTP/1.0, or `Connection: close`.
pub(super) fn closes(response: &[u8]) -> bool {
    let Ok(Some(head)) = Head::parse(response, Message::Response) else {
        return false;
    };
    head.version == 0
        || head.header("connection").is_some_and(|value| {
            value
                .split(|b| *b == b',')
                .any(|option| option.trim_ascii().eq_ignore_ascii_case(b"close"))
        })
}

/// A response's head with its `Content-Length` set to `length` (added when it has none), the
/// other headers as they were; `head` as it is when it does not parse.
pub(super) fn with_content_length(head: &[u8], length: usize) -> Vec<u8> {
    let Ok(Some(Head {
        version,
        status: Some((code, reason)),
        headers,
        ..
    })) = Head::parse(head, Message::Response)
    else {
        return head.to_vec();
    };
    let mut out = format!("HTTP/1.{version} {code} {reason}\r\n").into_bytes();
    for header in headers
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case("content-length"))
    {
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {length}\r\n\r\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// A stream that hands out its pieces one read each, then ends.
    struct Pieces(VecDeque<Vec<u8>>);

    impl Pieces {
        fn of(pieces: &[&[u8]]) -> Pieces {
            Pieces(pieces.iter().map(|p| p.to_vec()).collect())
        }
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(out.remaining());
                out.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    const REQUEST: &[u8] = b"POST / HTTP/1.1\r\nHost: localhost\r\n\
        X-Amz-Target: DynamoDB_20120810.PutItem\r\nContent-Length: 2\r\n\r\n{}";
    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n\
        Content-Length: 11\r\n\r\n{\"Item\":{}}";

    /// Every message `stream` yields, then how it ended.
    async fn read_all(
        mut stream: Pieces,
        kind: Message,
    ) -> (Vec<Vec<u8>>, io::Result<Option<Vec<u8>>>) {
        let mut buffer = Vec::new();
        let mut messages = Vec::new();
        loop {
            match read_message(&mut stream, &mut buffer, kind).await {
                Ok(Some(message)) => messages.push(message),
                end => return (messages, end),
            }
        }
    }

    #[tokio::test]
    async fn a_head_arriving_in_pieces_is_read_whole_with_its_body() {
        // Cut inside the request line, a header name, the header block's end and the body.
        let cuts = [3, 20, 40, REQUEST.len() - 3, REQUEST.len() - 1];
        let mut pieces = Vec::new();
        let mut from = 0;
        for cut in cuts {
            pieces.push(&REQUEST[from..cut]);
            from = cut;
        }
        pieces.push(&REQUEST[from..]);
        let (messages, end) = read_all(Pieces::of(&pieces), Message::Request).await;
        assert_eq!(messages, vec![REQUEST.to_vec()]);
        assert!(end.unwrap().is_none(), "then a clean close");

        // One byte a read.
        let bytes: Vec<&[u8]> = REQUEST.chunks(1).collect();
        let (messages, _) = read_all(Pieces::of(&bytes), Message::Request).await;
        assert_eq!(messages, vec![REQUEST.to_vec()]);
    }

    #[tokio::test]
    async fn a_body_split_across_reads_is_waited_for_and_the_next_message_kept() {
        let (head, body) = split(RESPONSE, Message::Response);
        assert_eq!(body, b"{\"Item\":{}}");
        // The last read carries the body's end and the whole next answer (keep-alive).
        let last = [&body[7..], RESPONSE].concat();
        let stream = Pieces::of(&[head, &body[..3], &body[3..7], &last]);
        let (messages, end) = read_all(stream, Message::Response).await;
        assert_eq!(messages, vec![RESPONSE.to_vec(), RESPONSE.to_vec()]);
        assert!(end.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_clean_close_is_none_and_a_close_inside_a_message_is_an_error() {
        let (messages, end) = read_all(Pieces::of(&[]), Message::Request).await;
        assert!(messages.is_empty());
        assert!(end.unwrap().is_none(), "closed before the first byte");

        for cut_at in [9, REQUEST.len() - 1] {
            let stream = Pieces::of(&[&REQUEST[..cut_at]]);
            let (messages, end) = read_all(stream, Message::Request).await;
            assert!(messages.is_empty());
            let kind = end.unwrap_err().kind();
            assert_eq!(
                kind,
                io::ErrorKind::UnexpectedEof,
                "closed at byte {cut_at}"
            );
        }
    }

    #[tokio::test]
    async fn a_malformed_head_is_invalid_data_as_soon_as_it_shows() {
        let malformed: [(&[u8], Message); 4] = [
            (b"NOT A REQUEST\r\n\r\n", Message::Request),
            (
                b"POST / HTTP/1.1\r\nBad Header: x\r\n\r\n",
                Message::Request,
            ),
            (b"HTTP/1.1 OK 200\r\n\r\n", Message::Response),
            (b"HTTP/2.0 200 OK\r\n\r\n", Message::Response),
        ];
        for (head, kind) in malformed {
            let (messages, end) = read_all(Pieces::of(&[head]), kind).await;
            assert!(messages.is_empty());
            let error = end.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        }
        // Before its blank line arrives: no waiting for the rest.
        let stream = Pieces::of(&[b"POST / HTTP/1.1\r\nBad Header"]);
        let error = read_all(stream, Message::Request).await.1.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    }

    #[tokio::test]
    async fn without_content_length_a_response_runs_to_the_end_and_a_request_has_no_body() {
        let response: &[u8] = b"HTTP/1.0 200 OK\r\nServer: moto\r\n\r\n{\"Item\"";
        let stream = Pieces::of(&[&response[..20], &response[20..], b":{}}"]);
        let (messages, end) = read_all(stream, Message::Response).await;
        assert_eq!(messages, vec![[response, b":{}}"].concat()]);
        assert!(end.unwrap().is_none());

        let request: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let stream = Pieces::of(&[request, request]);
        let (messages, _) = read_all(stream, Message::Request).await;
        assert_eq!(messages, vec![request.to_vec(), request.to_vec()]);
    }

    #[test]
    fn the_head_helpers_read_what_the_parser_found() {
        assert_eq!(target(REQUEST), "PutItem");
        assert_eq!(target(b"GET / HTTP/1.1\r\n\r\n"), "");
        assert_eq!(status(RESPONSE), 200);
        assert_eq!(status(b"HTTP/1.1 400 Bad Request\r\n\r\n"), 400);
        assert_eq!(status(b"not a response"), 0);
        assert_eq!(split(REQUEST, Message::Request).1, b"{}");
        assert_eq!(
            split(b"no head", Message::Request),
            (&b"no head"[..], &b""[..])
        );

        assert!(!closes(RESPONSE));
        assert!(closes(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(closes(b"HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n"));
        assert!(closes(
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\n\r\n"
        ));
        assert!(!closes(
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\n"
        ));

        let (head, _) = split(RESPONSE, Message::Response);
        assert_eq!(
            with_content_length(head, 1),
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n\
              Content-Length: 1\r\n\r\n"
        );
        assert_eq!(
            with_content_length(b"HTTP/1.0 500 Internal Server Error\r\n\r\n", 3),
            b"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 3\r\n\r\n",
            "added when it has none"
        );
    }
}
