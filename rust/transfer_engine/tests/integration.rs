//! Integration tests: a WRITE/READ between two engines in two processes with the bytes checked,
//! and the Rust transfer_engine_bench against the Go one in both directions.
//!
//! The second process is this test binary run again with MC_RUST_TARGET set (the
//! `target_process` test). The Go bench: $MOONCAKE_GO_BENCH_BIN, else the repository's
//! python/mooncake/bin/transfer_engine_bench, else built here with `go build`.
use mooncake_transfer_engine::{EngineError, LocalRequest, Opcode, TransferEngine};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

const MB: usize = 1 << 20;

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i * 13 + seed * 5 + (i >> 10)) % 253) as u8)
        .collect()
}

/// The target process: allocates 4 MiB of shared memory, fills [0, 1 MiB) with pattern(seed 1),
/// prints "TARGET_READY <segment> <addr>", then answers stdin "check OFFSET N SEED" with OK/ERR.
#[test]
fn target_process() {
    if std::env::var_os("MC_RUST_TARGET").is_none() {
        return; // only meaningful when started by another test
    }
    let e = TransferEngine::new("127.0.0.1", "P2PHANDSHAKE", "tcp", "").unwrap();
    let buf = e.allocate_shared(4 * MB).unwrap();
    buf.write_at(0, &pattern(MB, 1)).unwrap();
    println!("TARGET_READY {} {}", e.segment_name().unwrap(), buf.addr());
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let reply = match f.as_slice() {
            ["check", off, n, seed] => {
                let n: usize = n.parse().unwrap();
                let mut got = vec![0u8; n];
                buf.read_at(off.parse().unwrap(), &mut got).unwrap();
                if got == pattern(n, seed.parse().unwrap()) {
                    "OK".to_string()
                } else {
                    "ERR bytes differ".to_string()
                }
            }
            ["quit"] => break,
            _ => format!("ERR bad command {:?}", line),
        };
        println!("{}", reply);
        std::io::stdout().flush().unwrap();
    }
}

fn read_until(out: &mut BufReader<ChildStdout>, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "process exited before {:?}",
            marker
        );
        if let Some(i) = line.find(marker) {
            return line[i + marker.len()..].trim().to_string();
        }
    }
}

#[test]
fn write_and_read_between_two_processes() {
    let mut target = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "target_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MC_RUST_TARGET", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tin = target.stdin.take().unwrap();
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    let ready = read_until(&mut tout, "TARGET_READY ");
    let mut parts = ready.split_whitespace();
    let name = parts.next().unwrap().to_string();
    let remote: u64 = parts.next().unwrap().parse().unwrap();

    let e = TransferEngine::new("127.0.0.1", "P2PHANDSHAKE", "tcp", "").unwrap();
    let seg = e.open_segment(&name).unwrap();
    assert_eq!(e.first_buffer(seg).unwrap(), remote);
    let mut local = vec![0u8; 2 * MB];
    let mut mem = e.register_memory(&mut local, "cpu:0").unwrap();

    // READ the target's first MiB in 4 requests of one batch.
    let reads: Vec<LocalRequest> = (0..4)
        .map(|i| LocalRequest {
            opcode: Opcode::Read,
            local_offset: i * MB / 4,
            target: seg,
            target_addr: remote + (i * MB / 4) as u64,
            length: MB / 4,
        })
        .collect();
    e.transfer_sync(&mut mem, &reads).unwrap();
    assert!(
        mem.as_slice()[..MB] == pattern(MB, 1)[..],
        "READ bytes differ"
    );

    // WRITE a second pattern to [1 MiB, 2 MiB) of the target; it checks the bytes.
    mem.as_mut_slice()[MB..].copy_from_slice(&pattern(MB, 2));
    let w = LocalRequest {
        opcode: Opcode::Write,
        local_offset: MB,
        target: seg,
        target_addr: remote + MB as u64,
        length: MB,
    };
    e.transfer_sync(&mut mem, &[w]).unwrap();
    writeln!(tin, "check {} {} 2", MB, MB).unwrap();
    tin.flush().unwrap();
    assert_eq!(read_until(&mut tout, ""), "OK");
    // Nothing else moved: the first MiB is still the target's own pattern.
    writeln!(tin, "check 0 {} 1", MB).unwrap();
    assert_eq!(read_until(&mut tout, ""), "OK");

    // Past the end of the target's buffer: the engine refuses.
    let beyond = LocalRequest {
        target_addr: remote + (4 * MB) as u64,
        ..w
    };
    match e.transfer_sync(&mut mem, &[beyond]) {
        Err(EngineError::Failed { code, .. }) => assert!(code < 0),
        Err(EngineError::Transfer(_)) => {}
        other => panic!("want an error, got {:?}", other),
    }
    drop(mem);
    writeln!(tin, "quit").unwrap();
    assert!(target.wait().unwrap().success());
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
}

fn go_bench() -> PathBuf {
    if let Some(p) = std::env::var_os("MOONCAKE_GO_BENCH_BIN") {
        return PathBuf::from(p);
    }
    let packaged = root().join("python/mooncake/bin/transfer_engine_bench");
    if packaged.exists() {
        return packaged;
    }
    let out = root().join("build/bin/transfer_engine_bench");
    let st = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg("./cmd/transfer_engine_bench")
        .current_dir(root())
        .status()
        .expect("go build transfer_engine_bench (is Go installed?)");
    assert!(st.success());
    out
}

const RUST_BENCH: &str = env!("CARGO_BIN_EXE_transfer_engine_bench");

struct Target(Child, String);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_target(bin: &PathBuf) -> Target {
    let mut c = Command::new(bin)
        .args([
            "--mode=target",
            "--local_server_name=127.0.0.1",
            "--buffer_size=8388608",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let name = read_until(&mut out, "READY ");
    Target(c, name)
}

fn initiator(bin: &PathBuf, seg: &str, op: &str) -> String {
    let out = Command::new(bin)
        .args([
            "--mode=initiator",
            "--local_server_name=127.0.0.1",
            "--buffer_size=8388608",
            "--block_size=1048576",
            "--batch_size=4",
            "--threads=2",
            "--duration=0.3",
        ])
        .arg(format!("--segment_id={}", seg))
        .arg(format!("--operation={}", op))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        bin,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// "Test completed: duration D, batch count N, transport T, throughput X GB/s"
fn check_line(s: &str) {
    let line = s.lines().last().unwrap_or("");
    let rest = line
        .strip_prefix("Test completed: duration ")
        .unwrap_or_else(|| panic!("unexpected output {:?}", s));
    let f: Vec<&str> = rest.split(", ").collect();
    assert_eq!(f.len(), 4, "{:?}", line);
    assert!(f[0].parse::<f64>().unwrap() > 0.2, "{:?}", line);
    assert!(
        f[1].strip_prefix("batch count ")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0,
        "{:?}",
        line
    );
    assert!(
        f[2] == "transport shm" || f[2] == "transport tcp",
        "{:?}",
        line
    );
    let tp = f[3].strip_prefix("throughput ").unwrap();
    assert!(tp.ends_with(" GB/s"), "{:?}", line);
    assert!(
        tp.trim_end_matches(" GB/s").parse::<f64>().unwrap() > 0.0,
        "{:?}",
        line
    );
}

#[test]
fn rust_and_go_benches_interoperate() {
    let (go, rust) = (go_bench(), PathBuf::from(RUST_BENCH));
    let t = start_target(&go);
    for op in ["write", "read"] {
        check_line(&initiator(&rust, &t.1, op));
    }
    drop(t);
    let t = start_target(&rust);
    check_line(&initiator(&go, &t.1, "write"));
    check_line(&initiator(&rust, &t.1, "read"));
}

#[test]
fn bench_flags() {
    let out = Command::new(RUST_BENCH)
        .arg("--mode=nonsense")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "transfer_engine_bench: unknown --mode \"nonsense\" (initiator, target or baseline)"
    );
    let out = Command::new(RUST_BENCH)
        .arg("--no_such_flag=1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(RUST_BENCH)
        .args(["--mode", "initiator"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "transfer_engine_bench: --segment_id is required for the initiator"
    );
    let out = Command::new(RUST_BENCH)
        .args([
            "--mode=baseline",
            "--buffer_size=1048576",
            "--block_size=65536",
            "--duration=0.05",
            "--report_unit=MiB",
        ])
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2, "{:?}", s);
    assert!(
        lines[0].starts_with("memcpy throughput ") && lines[0].ends_with(" MiB/s"),
        "{:?}",
        s
    );
    assert!(
        lines[1].starts_with("socket throughput ") && lines[1].ends_with(" MiB/s"),
        "{:?}",
        s
    );
}
