//! The operator's workflows over the store's port: reading records ([`inspect`]) and settling a
//! call nobody else can ([`settle`]). `dedup list`, `show`, `evict` and `settle` are their command
//! lines.

pub(crate) mod inspect;
pub mod settle;
