//! The documented example (docs/rust.md): connect, put, put with replication, check, size, get,
//! remove.
//!
//! Start a master first (`python/mooncake/bin/mooncake_master --rpc_port=50051`), then
//!
//!     cargo run --example basic_usage -- 127.0.0.1:50051
//!
//! Arguments (all optional): master address (default 127.0.0.1:50051), local hostname (default
//! 127.0.0.1), metadata server (default P2PHANDSHAKE), protocol (default tcp).
use mooncake_store::{MooncakeStore, ReplicateConfig, StoreError};

fn main() -> Result<(), StoreError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, def: &str| args.get(i).cloned().unwrap_or_else(|| def.to_string());
    let master = arg(0, "127.0.0.1:50051");
    let hostname = arg(1, "127.0.0.1");
    let metadata = arg(2, "P2PHANDSHAKE");
    let protocol = arg(3, "tcp");

    // 1. Create a store handle
    let store = MooncakeStore::new()?;

    // 2. Connect to a running Mooncake master
    store.setup(
        &hostname, // local_hostname
        &metadata, // metadata_server
        512 << 20, // global_segment_size (512 MiB)
        128 << 20, // local_buffer_size  (128 MiB)
        &protocol, // protocol: "tcp" | "rdma" | ...
        "",        // device_name ("" for auto)
        &master,   // mooncake_master address
    )?;

    // 3. Store a value
    store.put("my-key", b"hello, mooncake!", None)?;

    // 4. Store with replication options (one replica per segment: this client has one)
    let config = ReplicateConfig {
        replica_num: 1,
        with_soft_pin: true,
        with_hard_pin: false,
        preferred_segments: vec![store.hostname()?],
    };
    store.put("replicated-key", b"replicated value", Some(&config))?;

    // 5. Check existence
    let exists: bool = store.is_exist("my-key")?;
    assert!(exists);

    // 6. Get size
    let size: u64 = store.get_size("my-key")?;
    assert_eq!(size, 16);

    // 7. Retrieve value
    let data: Vec<u8> = store.get("my-key")?;
    assert_eq!(data, b"hello, mooncake!");

    // A missing key is OperationFailed(OBJECT_NOT_FOUND).
    match store.get("no-such-key") {
        Err(e) if e.is_not_found() => println!("missing key: {}", e),
        other => panic!("unexpected {:?}", other),
    }

    // 8. Remove (force: the get above holds a lease on the key)
    store.remove("my-key", /*force=*/ true)?;
    store.remove("replicated-key", true)?;
    println!(
        "basic_usage: put, get ({} bytes), is_exist, get_size, remove: ok",
        data.len()
    );
    Ok(())
}
