//! Result encoding shared by both stores: gzip above a threshold, and the size limits that keep a
//! record inside one DynamoDB item.

use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use super::StoreError;

/// Results longer than this are stored gzip-compressed (when that makes them smaller).
pub const DEFAULT_COMPRESS_THRESHOLD: usize = 8 * 1024;

/// DynamoDB's partition key limit.
pub const MAX_KEY_BYTES: usize = 2048;

/// Limit for the fingerprint and the tool name, so that a record's metadata stays small.
pub const MAX_LABEL_BYTES: usize = 1024;

/// Largest stored (possibly compressed) result: a DynamoDB item holds 400 KB, counted as
/// attribute names plus values; 8 KiB is kept for the key and the other attributes, which the
/// limits above bound to well under that.
pub const MAX_STORED_RESULT_BYTES: usize = 400 * 1024 - 8 * 1024;

/// Largest result accepted before compression. It also caps decompression, so a corrupt or
/// hostile item cannot make a reader inflate gigabytes.
pub const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// How a stored result is encoded; stored next to it as `result_encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultEncoding {
    /// The bytes as given.
    Raw,
    /// gzip (RFC 1952).
    Gzip,
}

impl ResultEncoding {
    /// The stored spelling.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            ResultEncoding::Raw => "raw",
            ResultEncoding::Gzip => "gzip",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<ResultEncoding> {
        match s {
            "raw" => Some(ResultEncoding::Raw),
            "gzip" => Some(ResultEncoding::Gzip),
            _ => None,
        }
    }
}

/// A result as it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedResult {
    pub(crate) encoding: ResultEncoding,
    pub(crate) bytes: Vec<u8>,
}

/// Encodes a result for storage, or refuses it with [`StoreError::ResultTooLarge`].
pub(crate) fn encode_result(
    result: &[u8],
    compress_threshold: usize,
) -> Result<EncodedResult, StoreError> {
    if result.len() > MAX_RESULT_BYTES {
        return Err(StoreError::ResultTooLarge {
            bytes: result.len(),
        });
    }
    let mut encoded = EncodedResult {
        encoding: ResultEncoding::Raw,
        bytes: result.to_vec(),
    };
    if result.len() > compress_threshold {
        let gz = gzip(result);
        if gz.len() < result.len() {
            encoded = EncodedResult {
                encoding: ResultEncoding::Gzip,
                bytes: gz,
            };
        }
    }
    if encoded.bytes.len() > MAX_STORED_RESULT_BYTES {
        return Err(StoreError::ResultTooLarge {
            bytes: encoded.bytes.len(),
        });
    }
    Ok(encoded)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(
        Vec::with_capacity(data.len() / 4 + 64),
        Compression::default(),
    );
    // Writing into a Vec cannot fail.
    enc.write_all(data).expect("gzip into a Vec");
    enc.finish().expect("gzip into a Vec")
}

/// Decodes a stored result. Never panics; bad input is [`StoreError::Corrupt`], and output
/// beyond [`MAX_RESULT_BYTES`] is refused rather than inflated.
pub fn decode_result(encoding: ResultEncoding, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    match encoding {
        ResultEncoding::Raw => Ok(bytes.to_vec()),
        ResultEncoding::Gzip => {
            let mut out = Vec::with_capacity(bytes.len().saturating_mul(4).min(MAX_RESULT_BYTES));
            let limit = u64::try_from(MAX_RESULT_BYTES).unwrap_or(u64::MAX) + 1;
            GzDecoder::new(bytes)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|e| StoreError::Corrupt(format!("result does not gunzip: {e}")))?;
            if out.len() > MAX_RESULT_BYTES {
                return Err(StoreError::Corrupt(format!(
                    "result inflates beyond {MAX_RESULT_BYTES} bytes"
                )));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..len).map(|_| rng.u8(..)).collect()
    }

    #[test]
    fn small_results_are_stored_raw() {
        let r = b"{\"ok\":true}";
        let e = encode_result(r, DEFAULT_COMPRESS_THRESHOLD).unwrap();
        assert_eq!(e.encoding, ResultEncoding::Raw);
        assert_eq!(decode_result(e.encoding, &e.bytes).unwrap(), r);
    }

    #[test]
    fn results_over_the_threshold_are_gzipped_when_that_helps() {
        let r = "{\"row\":\"the same row again\"},"
            .repeat(1000)
            .into_bytes();
        let e = encode_result(&r, DEFAULT_COMPRESS_THRESHOLD).unwrap();
        assert_eq!(e.encoding, ResultEncoding::Gzip);
        assert!(e.bytes.len() < r.len() / 10);
        assert_eq!(decode_result(e.encoding, &e.bytes).unwrap(), r);

        let n = noise(20_000, 1);
        let e = encode_result(&n, DEFAULT_COMPRESS_THRESHOLD).unwrap();
        assert_eq!(
            e.encoding,
            ResultEncoding::Raw,
            "gzip of noise is larger, keep it raw"
        );
    }

    #[test]
    fn results_that_cannot_fit_are_refused() {
        let n = noise(MAX_STORED_RESULT_BYTES + 1, 2);
        match encode_result(&n, DEFAULT_COMPRESS_THRESHOLD) {
            Err(StoreError::ResultTooLarge { bytes }) => assert_eq!(bytes, n.len()),
            other => panic!("expected ResultTooLarge, got {other:?}"),
        }
        let huge = vec![b'a'; MAX_RESULT_BYTES + 1];
        assert!(matches!(
            encode_result(&huge, DEFAULT_COMPRESS_THRESHOLD),
            Err(StoreError::ResultTooLarge { .. })
        ));
    }

    #[test]
    fn bad_gzip_and_gzip_bombs_are_corrupt_not_panics() {
        assert!(matches!(
            decode_result(ResultEncoding::Gzip, b"not gzip"),
            Err(StoreError::Corrupt(_))
        ));
        let bomb = gzip(&vec![0u8; MAX_RESULT_BYTES + 10]);
        assert!(matches!(
            decode_result(ResultEncoding::Gzip, &bomb),
            Err(StoreError::Corrupt(_))
        ));
        let ok = gzip(b"");
        assert_eq!(decode_result(ResultEncoding::Gzip, &ok).unwrap(), b"");
    }
}
