//! What an open client connection costs the server before hyper's protocol state (issue 27:
//! a kubelet storm is 5,000 connections, one a node). dhat measures the heap of connections
//! accepted and waiting for their first bytes: the connection's task and what it holds for
//! life. The task was once sized for the TLS handshake and a second copy of the connection
//! (~10 KB on every connection, TLS or not); docs/memory.md has the figures. 3.0 KB now;
//! the handshake left in the task reads 3.9 KB, a second copy of the connection 7.1 KB.

use listwatch_testkit::server as common;

use std::time::Duration;

use listwatch_server::ServerConfig;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const CONNECTIONS: usize = 100;

/// The server's heap once it has stopped changing (every connection accepted and polled).
async fn settled_heap() -> dhat::HeapStats {
    let mut last = dhat::HeapStats::get();
    let mut steady = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = dhat::HeapStats::get();
        steady = if now.curr_bytes == last.curr_bytes {
            steady + 1
        } else {
            0
        };
        last = now;
        if steady == 5 {
            break;
        }
    }
    last
}

#[tokio::test]
async fn an_open_connection_holds_at_most_3_5_kib_before_its_first_request() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let server = common::start(0, ServerConfig::default()).await;
    let before = settled_heap().await;
    // Blocking std sockets: the client side allocates nothing per connection on the heap.
    let open: Vec<std::net::TcpStream> = (0..CONNECTIONS)
        .map(|_| std::net::TcpStream::connect(server.addr).expect("connect"))
        .collect();
    let after = settled_heap().await;
    let blocks = after.curr_blocks.saturating_sub(before.curr_blocks);
    let per_connection = after.curr_bytes.saturating_sub(before.curr_bytes) / CONNECTIONS;
    // Each connection must be accepted and held (its task, its boxed connection, its
    // connection place): otherwise the bound below would hold trivially.
    assert!(
        blocks >= 3 * CONNECTIONS,
        "{blocks} heap blocks for {CONNECTIONS} accepted connections"
    );
    assert!(
        per_connection <= 3584,
        "an open, idle connection holds {per_connection} B of heap (limit 3.5 KiB)"
    );
    eprintln!("{per_connection} B a connection ({blocks} blocks for {CONNECTIONS})");
    drop(open);
}
