//! Admission limits (moved out of limits.rs, which keeps the server's source small): slots
//! and buffer budget come back on drop; one connection or user cannot take every slot.

use listwatch_server::limits::{LimitConfig, Limits, Requester};
#[test]
fn list_slots_and_budget_are_returned_on_drop() {
    let l = Limits::new(LimitConfig {
        max_lists: 2,
        response_buffer_budget: 1 << 20,
        ..LimitConfig::default()
    });
    let a = l.admit_list(64 << 10, Requester::default()).expect("1");
    let b = l.admit_list(64 << 10, Requester::default()).expect("2");
    assert!(
        l.admit_list(64 << 10, Requester::default()).is_err(),
        "third LIST refused"
    );
    drop(a);
    let _c = l
        .admit_list(64 << 10, Requester::default())
        .expect("slot returned");
    drop(b);
    // Budget: 1 MiB / 128 KiB = 8 at most, whatever the count limit.
    let l = Limits::new(LimitConfig {
        max_lists: 100,
        response_buffer_budget: 1 << 20,
        ..LimitConfig::default()
    });
    let held: Vec<_> = (0..8)
        .map(|_| {
            l.admit_list(64 << 10, Requester::default())
                .expect("in budget")
        })
        .collect();
    assert!(
        l.admit_list(64 << 10, Requester::default()).is_err(),
        "budget exhausted"
    );
    drop(held);
}

#[test]
fn per_user_watch_cap() {
    let l = Limits::new(LimitConfig {
        max_watches_per_user: 2,
        ..LimitConfig::default()
    });
    let a = l
        .admit_watch("alice", None, Requester::default())
        .expect("1");
    let _b = l
        .admit_watch("alice", None, Requester::default())
        .expect("2");
    assert!(l.admit_watch("alice", None, Requester::default()).is_err());
    let _other = l
        .admit_watch("bob", None, Requester::default())
        .expect("bob has his own");
    drop(a);
    let _c = l
        .admit_watch("alice", None, Requester::default())
        .expect("slot returned");
}

#[test]
fn one_connection_or_user_cannot_take_every_list_slot() {
    let l = Limits::new(LimitConfig {
        max_lists: 10,
        max_lists_per_connection: 3,
        max_lists_per_user: 4,
        ..LimitConfig::default()
    });
    let greedy = listwatch_server::connection::Connection::new();
    let on = |c| Requester {
        connection: Some(c),
        user: None,
    };
    let held: Vec<_> = (0..3)
        .map(|_| l.admit_list(1024, on(&greedy)).expect("within its share"))
        .collect();
    assert!(
        l.admit_list(1024, on(&greedy)).is_err(),
        "fourth on one connection"
    );
    let other = listwatch_server::connection::Connection::new();
    let _o = l
        .admit_list(1024, on(&other))
        .expect("another connection is served");
    drop(held);
    let _again = l.admit_list(1024, on(&greedy)).expect("slots come back");
    let alice = |c| Requester {
        connection: Some(c),
        user: Some("alice"),
    };
    let conns: Vec<_> = (0..5)
        .map(|_| listwatch_server::connection::Connection::new())
        .collect();
    let held: Vec<_> = conns[..4]
        .iter()
        .map(|c| l.admit_list(1024, alice(c)).expect("within alice's share"))
        .collect();
    assert!(
        l.admit_list(1024, alice(&conns[4])).is_err(),
        "alice's fifth"
    );
    drop(held);
}
