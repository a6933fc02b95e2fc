//! listwatch's system tests: the server against the real parts it meets in a cluster — etcd
//! (plain and TLS), kubectl, kube-rs, client-go-style protobuf informers, the Python client,
//! the reference cluster's storage and RBAC decisions. They live apart from the server's
//! own tests so that `cargo test -p listwatch-server` needs neither protoc nor etcd; README's
//! test command (`scripts/test`) installs what these need and runs them with the rest.
