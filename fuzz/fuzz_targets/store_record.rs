//! The store-record decoder never panics on any item a table could hold: missing, mistyped or
//! undecodable attributes are `StoreError::Corrupt`, and a gzip result never inflates past the
//! limit. Items are built from the input: known attribute names or arbitrary ones, each value of
//! any attribute type; `Gzip` values are real gzip of arbitrary bytes so decoding also succeeds.
#![no_main]

use std::collections::HashMap;
use std::io::Write;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use toolcall_dedup::store::{
    DynamoDbConfig, MAX_RESULT_BYTES, ResultEncoding, StoreError, decode_item, decode_result,
};

#[derive(Debug, Arbitrary)]
enum Name {
    Known(u8),
    Other(String),
}

#[derive(Debug, Arbitrary)]
enum Attr {
    S(String),
    /// A status or encoding spelling, or an integer: the values a real item holds.
    Word(u8),
    N(String),
    Int(i64),
    B(Vec<u8>),
    Gzip(Vec<u8>),
    Bool(bool),
    Null,
    L(Vec<String>),
}

const NAMES: [&str; 11] = [
    "pk",
    "expires_at",
    "status",
    "lease_until",
    "lease_token",
    "fingerprint",
    "tool",
    "created_at",
    "result",
    "result_encoding",
    "result_omitted",
];
const WORDS: [&str; 6] = ["IN_PROGRESS", "COMPLETED", "raw", "gzip", "completed", ""];

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fuzz_target!(|input: (Vec<(Name, Attr)>, Vec<u8>)| {
    let (attrs, raw) = input;
    let mut item = HashMap::new();
    for (name, attr) in attrs {
        let name = match name {
            Name::Known(i) => NAMES[i as usize % NAMES.len()].to_string(),
            Name::Other(s) => s,
        };
        let value = match attr {
            Attr::S(s) => AttributeValue::S(s),
            Attr::Word(i) => AttributeValue::S(WORDS[i as usize % WORDS.len()].to_string()),
            Attr::N(s) => AttributeValue::N(s),
            Attr::Int(n) => AttributeValue::N(n.to_string()),
            Attr::B(b) => AttributeValue::B(Blob::new(b)),
            Attr::Gzip(b) => AttributeValue::B(Blob::new(gzip(&b))),
            Attr::Bool(b) => AttributeValue::Bool(b),
            Attr::Null => AttributeValue::Null(true),
            Attr::L(l) => AttributeValue::L(l.into_iter().map(AttributeValue::S).collect()),
        };
        item.insert(name, value);
    }
    let cfg = DynamoDbConfig::new("fuzz");
    match decode_item(&cfg, &item) {
        Ok(record) => {
            // A completed record has its result or the marker of one too large to store.
            assert_eq!(
                record.result.is_some() || record.omitted_result_bytes.is_some(),
                record.status.as_str() == "COMPLETED"
            );
            assert!(record.result.is_none() || record.omitted_result_bytes.is_none());
            assert!(
                record
                    .result
                    .as_ref()
                    .is_none_or(|r| r.len() <= MAX_RESULT_BYTES)
            );
        }
        Err(StoreError::Corrupt(message)) => assert!(!message.is_empty()),
        Err(other) => panic!("not Corrupt: {other:?}"),
    }
    // The codec alone, on raw bytes.
    for encoding in [ResultEncoding::Raw, ResultEncoding::Gzip] {
        match decode_result(encoding, &raw) {
            Ok(out) => assert!(out.len() <= MAX_RESULT_BYTES),
            Err(StoreError::Corrupt(_)) => {}
            Err(other) => panic!("not Corrupt: {other:?}"),
        }
    }
});
