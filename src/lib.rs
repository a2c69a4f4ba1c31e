//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
pub mod cli;
pub mod corpus;
pub mod key;
