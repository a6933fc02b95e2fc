//! The system tests' helpers: the server's own test helpers (one copy, in
//! crates/server/tests/common) plus real etcd members.
#![allow(dead_code, unused_imports)]

#[path = "../../../server/tests/common/mod.rs"]
mod server;

pub mod etcd;
pub use server::*;
