//! listwatch-core: the vocabulary of the Kubernetes read path, pure but for one /proc reader.
//!
//! - [`options`]: where query parameters are parsed and validated (`ListOptions`).
//! - [`labels`], [`fields`]: selectors with kube-apiserver's grammar and messages.
//! - [`continue_token`]: continue tokens compatible with kube-apiserver.
//! - [`status`]: typed errors and their single mapping to the wire `Status`.
//! - [`resource`]: what the server knows about each resource type.
//! - [`verb`]: a request's verb, decided once.
//! - [`process`]: a process's RSS and CPU from /proc (this crate's one piece of I/O, shared
//!   by the server's metrics and the load-test harness).

pub mod continue_token;
pub mod fields;
pub mod json;
pub mod labels;
pub mod options;
pub mod process;
pub mod resource;
pub mod scan;
pub mod status;
pub mod time;
pub mod verb;

pub use continue_token::ContinueToken;
pub use fields::FieldSelector;
pub use labels::LabelSelector;
pub use options::{
    ListOptions, Propagation, QueryParams, ResourceVersion, RvMatch, WatchFlags, WriteOptions,
};
pub use resource::{PrinterColumn, ResourceInfo, builtin_resource, builtin_resources};
pub use status::{ApiError, FieldError, ObjectRef, Status};
pub use verb::Verb;
