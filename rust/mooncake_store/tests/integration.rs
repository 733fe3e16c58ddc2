//! Integration tests against a real mooncake_master and a second client process.
//!
//! The master binary: $MOONCAKE_MASTER_BIN, else the repository's
//! python/mooncake/bin/mooncake_master (built by `make setup`), else built here with `go build`.
//! The second client is this test binary run again with MC_RUST_PEER_MASTER set: it runs the
//! `peer_process` test, which serves commands on stdin.
use mooncake_store::{codes, Health, MooncakeStore, ReplicateConfig, StoreError};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;

const MB: usize = 1 << 20;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
}

fn master_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MOONCAKE_MASTER_BIN") {
        return PathBuf::from(p);
    }
    let packaged = root().join("python/mooncake/bin/mooncake_master");
    if packaged.exists() {
        return packaged;
    }
    let out = root().join("build/bin/mooncake_master");
    let st = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg("./cmd/mooncake_master")
        .current_dir(root())
        .status()
        .expect("go build mooncake_master (is Go installed?)");
    assert!(st.success(), "go build ./cmd/mooncake_master failed");
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A mooncake_master on free ports; killed on drop.
struct Master {
    proc: Child,
    addr: String,
}

impl Master {
    fn start() -> Master {
        let (rpc, metrics) = (free_port(), free_port());
        let mut proc = Command::new(master_bin())
            .arg(format!("--rpc_port={}", rpc))
            .arg(format!("--metrics_port={}", metrics))
            .args(["--rpc_address=127.0.0.1", "--enable_metric_reporting=false"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mooncake_master");
        let mut out = BufReader::new(proc.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                panic!(
                    "mooncake_master exited before MOONCAKE_MASTER_READY: {:?}",
                    proc.wait()
                );
            }
            if line.starts_with("MOONCAKE_MASTER_READY") {
                break;
            }
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        Master {
            proc,
            addr: format!("127.0.0.1:{}", rpc),
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i * 31 + seed * 7 + (i >> 9)) % 251) as u8)
        .collect()
}

fn new_store(master: &Master, segment: u64) -> MooncakeStore {
    let s = MooncakeStore::new().unwrap();
    s.setup(
        "127.0.0.1",
        "P2PHANDSHAKE",
        segment,
        16 << 20,
        "tcp",
        "",
        &master.addr,
    )
    .unwrap();
    s
}

fn invalid<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::InvalidArgument(m)) => m,
        other => panic!("want InvalidArgument, got {:?}", other),
    }
}

/// The other client process: stdin commands "put KEY N SEED", "check KEY N SEED", "quit";
/// answers "OK" or "ERR <what>".
#[test]
fn peer_process() {
    let master = match std::env::var("MC_RUST_PEER_MASTER") {
        Ok(m) => m,
        Err(_) => return, // only meaningful when started by another test
    };
    let s = MooncakeStore::new().unwrap();
    s.setup(
        "127.0.0.1",
        "P2PHANDSHAKE",
        64 << 20,
        16 << 20,
        "tcp",
        "",
        &master,
    )
    .unwrap();
    println!("PEER_READY {}", s.hostname().unwrap());
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let reply = match f.as_slice() {
            ["put", key, n, seed] => match s.put(
                key,
                &pattern(n.parse().unwrap(), seed.parse().unwrap()),
                None,
            ) {
                Ok(()) => "OK".to_string(),
                Err(e) => format!("ERR {}", e),
            },
            ["check", key, n, seed] => match s.get(key) {
                Ok(v) if v == pattern(n.parse().unwrap(), seed.parse().unwrap()) => {
                    "OK".to_string()
                }
                Ok(v) => format!("ERR {} bytes differ", v.len()),
                Err(e) => format!("ERR {}", e),
            },
            ["quit"] => break,
            _ => format!("ERR bad command {:?}", line),
        };
        println!("{}", reply);
        std::io::stdout().flush().unwrap();
    }
    s.close().unwrap();
}

struct Peer {
    proc: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    hostname: String,
}

impl Peer {
    fn start(master: &Master) -> Peer {
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
            .env("MC_RUST_PEER_MASTER", &master.addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = proc.stdin.take().unwrap();
        let mut stdout = BufReader::new(proc.stdout.take().unwrap());
        let mut line = String::new();
        let hostname = loop {
            line.clear();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "peer exited before PEER_READY"
            );
            // libtest prints "test peer_process ... " before the peer's first line.
            if let Some(i) = line.find("PEER_READY ") {
                break line[i + "PEER_READY ".len()..].trim().to_string();
            }
        };
        Peer {
            proc,
            stdin,
            stdout,
            hostname,
        }
    }

    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{}", c).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "peer exited during {:?}",
            c
        );
        line.trim().to_string()
    }

    fn quit(mut self) {
        writeln!(self.stdin, "quit").unwrap();
        let st = self.proc.wait().unwrap();
        assert!(st.success(), "peer process failed: {:?}", st);
    }
}

#[test]
fn put_get_between_two_processes() {
    let master = Master::start();
    let mut peer = Peer::start(&master);
    let store = new_store(&master, 64 << 20);
    assert_eq!(store.health_check(), Health::Healthy);
    let me = store.hostname().unwrap();
    assert!(me.starts_with("127.0.0.1:"), "{}", me);
    assert_ne!(me, peer.hostname);

    // The peer puts, this process reads exactly the same bytes.
    assert_eq!(peer.cmd(&format!("put peer/big {} 1", 3 * MB + 5)), "OK");
    assert_eq!(peer.cmd("put peer/small 5 2"), "OK");
    assert_eq!(store.get("peer/big").unwrap(), pattern(3 * MB + 5, 1));
    assert_eq!(store.get("peer/small").unwrap(), pattern(5, 2));
    assert_eq!(store.get_size("peer/big").unwrap(), (3 * MB + 5) as u64);
    assert!(store.is_exist("peer/small").unwrap());

    // This process puts onto the peer's segment; the peer reads it back.
    let cfg = ReplicateConfig {
        replica_num: 1,
        with_soft_pin: true,
        with_hard_pin: false,
        preferred_segments: vec![peer.hostname.clone()],
    };
    store.put("main/1", &pattern(MB, 3), Some(&cfg)).unwrap();
    assert_eq!(peer.cmd(&format!("check main/1 {} 3", MB)), "OK");
    // Two replicas, one on each segment: still exact.
    let two = ReplicateConfig {
        replica_num: 2,
        ..ReplicateConfig::default()
    };
    store
        .put("main/2", &pattern(2 * MB, 4), Some(&two))
        .unwrap();
    assert_eq!(peer.cmd(&format!("check main/2 {} 4", 2 * MB)), "OK");
    assert_eq!(store.get("main/2").unwrap(), pattern(2 * MB, 4));

    // Write-once: a second put of a key succeeds and keeps the first value.
    store.put("main/1", b"other", None).unwrap();
    assert_eq!(store.get("main/1").unwrap(), pattern(MB, 3));

    // put_parts joins the parts.
    store
        .put_parts("main/parts", &[b"abc", b"", b"defg"], None)
        .unwrap();
    assert_eq!(store.get("main/parts").unwrap(), b"abcdefg");

    // get_into a plain buffer, and a buffer too small for the value.
    let mut buf = vec![0u8; 2 * MB];
    assert_eq!(
        store.get_into("peer/big", &mut buf[..]),
        Err(StoreError::OperationFailed(codes::BUFFER_OVERFLOW))
    );
    assert_eq!(store.get_into("main/1", &mut buf).unwrap(), MB);
    assert_eq!(&buf[..MB], &pattern(MB, 3)[..]);

    // Missing keys: OBJECT_NOT_FOUND (-704) as OperationFailed.
    let nf = StoreError::OperationFailed(codes::OBJECT_NOT_FOUND);
    assert_eq!(store.get("missing"), Err(nf.clone()));
    assert_eq!(store.get_size("missing"), Err(nf.clone()));
    assert_eq!(store.get_into("missing", &mut buf), Err(nf.clone()));
    assert_eq!(store.remove("missing", false), Err(nf.clone()));
    assert!(!store.is_exist("missing").unwrap());
    assert!(store.get("missing").unwrap_err().is_not_found());

    // A get grants a lease: a plain remove waits for it, a forced one not.
    assert_eq!(
        store.remove("peer/small", false),
        Err(StoreError::OperationFailed(codes::OBJECT_HAS_LEASE))
    );
    store.remove("peer/small", true).unwrap();
    assert!(!store.is_exist("peer/small").unwrap());
    assert_eq!(peer.cmd("check peer/small 5 2"), format!("ERR {}", nf));

    peer.quit();
    store.close().unwrap();
}

#[test]
fn batches_and_registered_buffers() {
    let master = Master::start();
    let store = new_store(&master, 64 << 20);
    let keys: Vec<String> = (0..4).map(|i| format!("b/{}", i)).collect();
    let vals: Vec<Vec<u8>> = (0..4)
        .map(|i| pattern(100_000 + i * 1000, i as u64))
        .collect();
    let refs: Vec<&[u8]> = vals.iter().map(|v| v.as_slice()).collect();
    let put = store.batch_put(&keys, &refs, None).unwrap();
    assert_eq!(put, vec![Ok(()); 4]);

    let mut with_missing = keys;
    with_missing.push("b/missing".into());
    let got = store.batch_get(&with_missing).unwrap();
    assert_eq!(got.len(), 5);
    for i in 0..4 {
        assert_eq!(got[i].as_ref().unwrap(), &vals[i]);
    }
    assert_eq!(
        got[4],
        Err(StoreError::OperationFailed(codes::OBJECT_NOT_FOUND))
    );
    assert_eq!(
        store.batch_is_exist(&with_missing).unwrap(),
        vec![Ok(true), Ok(true), Ok(true), Ok(true), Ok(false)]
    );

    let mut a = vec![0u8; 101_000];
    let mut b = [0u8; 10];
    let res = store
        .batch_get_into(&["b/1", "b/2"], &mut [&mut a[..], &mut b[..]])
        .unwrap();
    assert_eq!(
        res,
        vec![
            Ok(101_000),
            Err(StoreError::OperationFailed(codes::BUFFER_OVERFLOW))
        ]
    );
    assert_eq!(a, vals[1]);

    // Zero-copy: register a buffer, put from ranges of it, get into it.
    let mut mem = vec![0u8; 4 * MB];
    {
        let mut reg = store.register_buffer(&mut mem).unwrap();
        assert_eq!(reg.len(), 4 * MB);
        reg.as_mut_slice()[..MB].copy_from_slice(&pattern(MB, 9));
        reg.as_mut_slice()[MB..2 * MB].copy_from_slice(&pattern(MB, 10));
        reg.put_from("z/9", 0..MB, None).unwrap();
        let r = reg
            .batch_put_from(&["z/10", "z/half"], &[MB..2 * MB, MB..MB + MB / 2], None)
            .unwrap();
        assert_eq!(r, vec![Ok(()), Ok(())]);
        assert_eq!(reg.get_into("z/10", 2 * MB).unwrap(), MB);
        assert_eq!(&reg.as_slice()[2 * MB..3 * MB], &pattern(MB, 10)[..]);
        let r = reg
            .batch_get_into(&["z/9", "z/half"], &[3 * MB..4 * MB, 0..MB / 2])
            .unwrap();
        assert_eq!(r, vec![Ok(MB), Ok(MB / 2)]);
        assert_eq!(&reg.as_slice()[3 * MB..], &pattern(MB, 9)[..]);
        assert_eq!(&reg.as_slice()[..MB / 2], &pattern(MB, 10)[..MB / 2]);
        // get_into through the slice of a registered buffer is zero-copy too.
        assert_eq!(
            store
                .get_into("b/0", &mut reg.as_mut_slice()[..200_000])
                .unwrap(),
            100_000
        );
        assert_eq!(
            invalid(reg.put_from("z/x", 4 * MB..4 * MB + 1, None)),
            "range 4194304..4194305 is empty or outside the 4194304-byte buffer"
        );
        assert_eq!(
            invalid(reg.get_into("z/9", 4 * MB)),
            "range 4194304..4194304 is empty or outside the 4194304-byte buffer"
        );
    } // unregistered here; `mem` is usable again
    assert_eq!(&mem[..100_000], &vals[0][..]);
    assert_eq!(
        store.get("z/half").unwrap(),
        pattern(MB, 10)[..MB / 2].to_vec()
    );

    let removed = store.batch_remove(&["b/0", "b/missing"], true).unwrap();
    assert_eq!(
        removed,
        vec![
            Ok(()),
            Err(StoreError::OperationFailed(codes::OBJECT_NOT_FOUND))
        ]
    );
    assert_eq!(store.remove_by_regex("^z/", true).unwrap(), 3);
    assert_eq!(store.remove_all().unwrap(), 3); // b/1, b/2, b/3
    assert!(!store.is_exist("b/1").unwrap());
}

#[test]
fn invalid_arguments_and_setup_errors() {
    let master = Master::start();
    let store = new_store(&master, 16 << 20);
    assert_eq!(invalid(store.put("", b"v", None)), "key is empty");
    assert_eq!(invalid(store.get("")), "key is empty");
    assert_eq!(invalid(store.get_size("")), "key is empty");
    assert_eq!(invalid(store.is_exist("")), "key is empty");
    assert_eq!(invalid(store.remove("", false)), "key is empty");
    assert_eq!(
        invalid(store.put("nul\0key", b"v", None)),
        "key contains a NUL byte: \"nul\\0key\""
    );
    assert_eq!(
        invalid(store.put(&"k".repeat(4097), b"v", None)),
        "key is 4097 bytes, the limit is 4096"
    );
    assert_eq!(
        invalid(store.batch_put(&["ok", ""], &[b"1", b"2"], None)),
        "key is empty"
    );
    assert_eq!(invalid(store.batch_get(&["ok", ""])), "key is empty");
    assert_eq!(
        invalid(store.get_into("k", &mut [])),
        "get_into needs a non-empty buffer"
    );
    assert_eq!(
        invalid(store.register_buffer(&mut [])),
        "cannot register an empty buffer"
    );
    let zero = ReplicateConfig {
        replica_num: 0,
        ..ReplicateConfig::default()
    };
    assert_eq!(
        invalid(store.put("k", b"v", Some(&zero))),
        "replica_num must be at least 1"
    );
    // An empty value: the library's INVALID_PARAMS, mapped to InvalidArgument.
    assert!(!invalid(store.put("k", b"", None)).is_empty());
    // Setting up twice, or against a port nowhere listens: SetupError.
    match store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", &master.addr) {
        Err(StoreError::SetupError(m)) => assert!(m.contains("already set up"), "{}", m),
        other => panic!("{:?}", other),
    }
    let other = MooncakeStore::new().unwrap();
    let dead = format!("127.0.0.1:{}", free_port());
    assert!(matches!(
        other.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", &dead),
        Err(StoreError::SetupError(_))
    ));
    assert_eq!(other.health_check(), Health::NotSetUp);
}

#[test]
fn shared_between_threads() {
    let master = Master::start();
    let store = Arc::new(new_store(&master, 64 << 20));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..10u64 {
                    let key = format!("t{}/{}", t, i);
                    let v = pattern(50_000 + i as usize, t * 100 + i);
                    s.put(&key, &v, None).unwrap();
                    assert_eq!(s.get(&key).unwrap(), v);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(store.remove_all().unwrap(), 40);
}

/// examples/basic_usage.rs, the documented example, runs against a real master.
#[test]
fn basic_usage_example() {
    let master = Master::start();
    // target/debug/deps/integration-* -> target/debug/examples/basic_usage
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("basic_usage");
    assert!(
        example.exists(),
        "{} is not built (cargo test builds examples)",
        example.display()
    );
    let out = Command::new(example).arg(&master.addr).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "missing key: store operation failed: OBJECT_NOT_FOUND (-704)\n\
         basic_usage: put, get (16 bytes), is_exist, get_size, remove: ok\n"
    );
}
