//! The store under many clients (threads and launched processes), its timeouts, and the
//! launcher: every rank of a launched group meets the others in the store; a failing rank
//! stops the launch with its rank named.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use genesis_dist::{Error, GroupEnv, Launch, StoreClient, StoreServer};

const T: Duration = Duration::from_secs(20);

fn server() -> (StoreServer, String) {
    let s = StoreServer::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().to_string();
    (s, addr)
}

#[test]
fn set_get_add_check_and_wait() {
    let (_s, addr) = server();
    let mut a = StoreClient::connect(&addr, T).unwrap();
    let mut b = StoreClient::connect(&addr, T).unwrap();
    a.set("id", &[7u8; 128]).unwrap();
    assert_eq!(b.get("id", T).unwrap(), vec![7u8; 128]);
    assert_eq!(a.add("n", 5).unwrap(), 5);
    assert_eq!(b.add("n", -2).unwrap(), 3);
    assert_eq!(a.get("n", T).unwrap(), b"3");
    assert!(a.check(&["id", "n"]).unwrap());
    assert!(!a.check(&["id", "missing"]).unwrap());
    b.wait(&["id", "n"], T).unwrap();
    a.set("empty", b"").unwrap();
    assert_eq!(b.get("empty", T).unwrap(), b"");
    // ADD to a value that is not a counter: the server closes the connection.
    a.set("text", b"abc").unwrap();
    assert!(matches!(a.add("text", 1), Err(Error::Protocol(_))));
}

#[test]
fn a_get_waits_for_a_later_set_and_times_out_without_one() {
    let (_s, addr) = server();
    let writer_addr = addr.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut c = StoreClient::connect(&writer_addr, T).unwrap();
        c.set("late", b"here").unwrap();
    });
    let mut c = StoreClient::connect(&addr, T).unwrap();
    let t0 = Instant::now();
    assert_eq!(c.get("late", T).unwrap(), b"here");
    assert!(t0.elapsed() >= Duration::from_millis(150));
    writer.join().unwrap();
    let t0 = Instant::now();
    match c.get("never", Duration::from_millis(300)) {
        Err(Error::Timeout { op, .. }) => assert!(op.contains("never")),
        other => panic!("{other:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the timeout ended the wait"
    );
    // The connection still serves after a timeout the server reported.
    assert!(matches!(
        c.wait(&["never"], Duration::from_millis(100)),
        Err(Error::Timeout { .. })
    ));
    c.set("after", b"1").unwrap();
}

#[test]
fn connecting_to_nothing_times_out() {
    // A port nothing listens on (bound, then released).
    let addr = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().to_string()
    };
    match StoreClient::connect(&addr, Duration::from_millis(300)) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(StoreClient::connect("no-such-host.invalid:1", Duration::from_millis(100)).is_err());
}

#[test]
fn many_threads_count_and_meet_at_a_barrier() {
    let (_s, addr) = server();
    let n = 16;
    let go = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (addr, go) = (addr.clone(), go.clone());
            std::thread::spawn(move || {
                let mut c = StoreClient::connect(&addr, T).unwrap();
                go.wait();
                for _ in 0..100 {
                    c.add("count", 1).unwrap();
                }
                c.set(&format!("rank/{i}"), i.to_string().as_bytes())
                    .unwrap();
                c.barrier("b0", n, T).unwrap();
                // After the barrier every rank's key is there.
                for j in 0..n {
                    assert_eq!(
                        c.get(&format!("rank/{j}"), T).unwrap(),
                        j.to_string().as_bytes()
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = StoreClient::connect(&addr, T).unwrap();
    assert_eq!(c.add("count", 0).unwrap(), (n * 100) as i64);
}

/// The body of a launched rank (a no-op unless the launch tests start this binary with
/// `GENESIS_DIST_TEST_CHILD`): meet the others in the store, check the environment, and (in
/// `fail` mode) let rank 1 fail.
#[test]
fn child_rank() {
    let Ok(mode) = std::env::var("GENESIS_DIST_TEST_CHILD") else {
        return;
    };
    let env = GroupEnv::from_env().unwrap();
    if mode == "fail" && env.rank == 1 {
        panic!("rank 1 fails on purpose");
    }
    // Several nodes: the rank is the node's first plus the local rank, as torchrun numbers.
    let local_world: usize = std::env::var("LOCAL_WORLD_SIZE").unwrap().parse().unwrap();
    let group: usize = std::env::var("GROUP_RANK").unwrap().parse().unwrap();
    assert_eq!(env.rank, group * local_world + env.local_rank);
    let mut c = StoreClient::connect(&env.store_addr(), T).unwrap();
    c.set(
        &format!("seen/{}", env.rank),
        env.local_rank.to_string().as_bytes(),
    )
    .unwrap();
    c.barrier("start", env.world_size, T).unwrap();
    for r in 0..env.world_size {
        assert_eq!(
            c.get(&format!("seen/{r}"), T).unwrap(),
            (r % local_world).to_string().as_bytes()
        );
    }
    let total = c.add("sum", env.rank as i64 + 1).unwrap();
    assert!(total >= 1);
    c.barrier("end", env.world_size, T).unwrap();
    let n = env.world_size as i64;
    assert_eq!(c.add("sum", 0).unwrap(), n * (n + 1) / 2);
}

fn this_test(mode: &str, nproc: usize) -> Launch {
    Launch::new(std::env::current_exe().unwrap(), nproc)
        .args(["--exact", "child_rank", "--test-threads=1", "--quiet"])
        .env("GENESIS_DIST_TEST_CHILD", mode)
        .quiet()
}

#[test]
fn launched_ranks_meet_in_the_launchers_store() {
    this_test("ok", 4).run().unwrap();
}

/// Two nodes on this host (a launcher each, node 1 naming node 0's store): the six ranks meet
/// in one store, numbered as torchrun numbers them; a node other than 0 without the master's
/// address, or a node rank past the node count, is an error before anything starts.
#[test]
fn launchers_of_several_nodes_meet_in_node_zeros_store() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let node = move |rank: usize| {
        let l = this_test("ok", 3).nodes(2, rank);
        if rank == 0 {
            l.store_addr(format!("127.0.0.1:{port}"))
        } else {
            l.master(format!("127.0.0.1:{port}"))
        }
    };
    let one = std::thread::spawn(move || node(1).run());
    node(0).run().unwrap();
    one.join().unwrap().unwrap();
    assert!(matches!(
        this_test("ok", 2).nodes(2, 1).run(),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        this_test("ok", 2).nodes(2, 2).run(),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_failing_rank_stops_the_launch_and_is_named() {
    match this_test("fail", 3).run() {
        Err(Error::ProcessFailed { rank, .. }) => assert_eq!(rank, 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Launch::new("/nonexistent/program", 2).run(),
        Err(Error::Io { .. })
    ));
    assert!(matches!(
        Launch::new("true", 0).run(),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Malformed requests (an unknown op, a length past the limit, a connection closed mid-field)
/// close only their own connection: the server keeps serving everyone else.
#[test]
fn malformed_requests_close_only_their_connection() {
    use std::io::{Read, Write};
    let (_s, addr) = server();
    let mut good = StoreClient::connect(&addr, T).unwrap();
    good.set("k", b"v").unwrap();
    for bad in [
        vec![0xffu8],
        vec![1u8, 0xff, 0xff, 0xff, 0xff],
        vec![2u8, 3, 0, 0],
        vec![4u8, 0xff, 0xff, 0xff, 0x7f],
    ] {
        let mut raw = std::net::TcpStream::connect(&addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        raw.write_all(&bad).unwrap();
        // A partial field: finish the request by closing our side.
        raw.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        // The server closes the connection without a reply.
        let _ = raw.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{bad:?}: {rest:?}");
    }
    assert_eq!(good.get("k", T).unwrap(), b"v");
    let mut again = StoreClient::connect(&addr, T).unwrap();
    assert_eq!(again.add("c", 2).unwrap(), 2);
}
