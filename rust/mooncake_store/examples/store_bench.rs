//! Sequential put/get throughput of the Rust store client, measured like
//! bench/store_bench.py measures the Python client (see rust/scripts/store_bench.sh, which runs
//! both against the same master and mooncake_client).
//!
//!     cargo run --release --example store_bench -- --master=127.0.0.1:50051 --size=1048576 --n=300
//!
//! The client contributes no segment (values land on other clients' segments), replica_num=1.
//! Prints one line per method: `put`/`get` (copying API) and `put_from`/`get_into` (a registered
//! buffer, zero-copy).
use mooncake_store::{MooncakeStore, ReplicateConfig};
use std::time::Instant;

fn main() {
    let mut master = "127.0.0.1:50051".to_string();
    let mut hostname = "127.0.0.1".to_string();
    let mut size = 1usize << 20;
    let mut n = 300usize;
    for a in std::env::args().skip(1) {
        let (k, v) = a.split_at(
            a.find('=')
                .unwrap_or_else(|| panic!("want --name=value, got {}", a)),
        );
        let v = &v[1..];
        match k {
            "--master" => master = v.to_string(),
            "--hostname" => hostname = v.to_string(),
            "--size" => size = v.parse().expect("--size"),
            "--n" => n = v.parse().expect("--n"),
            _ => panic!("unknown flag {}", k),
        }
    }
    let store = MooncakeStore::new().unwrap();
    store
        .setup(&hostname, "P2PHANDSHAKE", 0, 128 << 20, "tcp", "", &master)
        .unwrap();
    let cfg = ReplicateConfig::default();
    let val: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
    // warm-up (connections, segment open) outside the timing
    store
        .put("rust-warm", &val[..4096.min(size)], None)
        .unwrap();
    store.get("rust-warm").unwrap();

    let report = |what: &str, secs: f64| {
        println!(
            "rust {:<8} size={} n={} {:9.0} op/s {:6.2} GiB/s",
            what,
            size,
            n,
            n as f64 / secs,
            (n * size) as f64 / secs / (1u64 << 30) as f64
        );
    };
    let keys: Vec<String> = (0..n).map(|i| format!("rb/{}/{}", size, i)).collect();
    let t = Instant::now();
    for k in &keys {
        store.put(k, &val, Some(&cfg)).unwrap();
    }
    report("put", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for k in &keys {
        assert_eq!(store.get(k).unwrap().len(), size);
    }
    report("get", t.elapsed().as_secs_f64());
    let mut plain = vec![0u8; size];
    let t = Instant::now();
    for k in &keys {
        assert_eq!(store.get_into(k, &mut plain).unwrap(), size);
    }
    report("get_into(unregistered)", t.elapsed().as_secs_f64());
    store.remove_all().unwrap();

    let mut mem = vec![0u8; size];
    mem.copy_from_slice(&val);
    let mut reg = store.register_buffer(&mut mem).unwrap();
    let t = Instant::now();
    for k in &keys {
        reg.put_from(k, 0..size, Some(&cfg)).unwrap();
    }
    report("put_from", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for k in &keys {
        assert_eq!(reg.get_into(k, 0).unwrap(), size);
    }
    report("get_into", t.elapsed().as_secs_f64());
    drop(reg);
    store.remove_all().unwrap();
    assert_eq!(mem, val);
}
