//! Rust port of cmd/transfer_engine_bench: the same flags and output line, so the two can run
//! against each other (a Go target with a Rust initiator and the reverse).
//!
//!   transfer_engine_bench --mode=target --local_server_name=127.0.0.1
//!   transfer_engine_bench --mode=initiator --segment_id=127.0.0.1:15123 --operation=write --block_size=67108864
//!   transfer_engine_bench --mode=baseline --block_size=67108864   # memcpy and plain socket copy
//!
//! The target allocates one shared buffer (--buffer_size), prints "READY <segment>" and serves
//! until it is killed. The initiator writes or reads --batch_size blocks of --block_size per
//! batch from --threads threads for --duration seconds and prints
//! "Test completed: duration D, batch count N, transport T, throughput X GB/s". The initiator
//! moves --buffer_size bytes of the target's first buffer (the C ABI does not expose its length:
//! keep --buffer_size at most the target's, the default on both sides).
use mooncake_transfer_engine::{
    Opcode, SegmentId, TransferEngine, TransferRequest, TransferStatus,
};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::exit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Flags {
    mode: String,
    metadata_server: String,
    local_server_name: String,
    segment_id: String,
    protocol: String,
    device_name: String,
    operation: String,
    buffer_size: u64,
    batch_size: usize,
    block_size: u64,
    threads: usize,
    duration: f64,
    report_unit: String,
}

const USAGE: &str = "Usage of transfer_engine_bench:
  --mode string             initiator, target or baseline (default \"initiator\")
  --metadata_server string  metadata connection string (default \"P2PHANDSHAKE\")
  --local_server_name string  local segment name (host or host:port)
  --segment_id string       target segment name (initiator)
  --protocol string         transport protocol (default \"tcp\")
  --device_name string      device name (unused by tcp)
  --operation string        read or write (default \"write\")
  --buffer_size uint        buffer size in bytes (default 1073741824)
  --batch_size int          requests per batch (default 128)
  --block_size uint         bytes per request (default 65536)
  --threads int             initiator threads (default 1)
  --duration float          test duration in seconds (default 10)
  --report_unit string      GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb (default \"GB\")";

fn die(msg: String) -> ! {
    eprintln!("transfer_engine_bench: {}", msg);
    exit(1)
}

fn bad_flag(msg: String) -> ! {
    eprintln!("{}\n{}", msg, USAGE);
    exit(2)
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &str) -> T {
    let parsed = if let Some(hex) = v.strip_prefix("0x") {
        u64::from_str_radix(hex, 16)
            .ok()
            .and_then(|n| n.to_string().parse().ok())
    } else {
        v.parse().ok()
    };
    parsed.unwrap_or_else(|| {
        bad_flag(format!(
            "invalid value {:?} for flag -{}: parse error",
            v, name
        ))
    })
}

/// Parses Go-style flags: -name=value, --name=value, -name value, --name value.
fn parse_flags(args: Vec<String>) -> Flags {
    let mut f = Flags {
        mode: "initiator".into(),
        metadata_server: "P2PHANDSHAKE".into(),
        local_server_name: String::new(),
        segment_id: String::new(),
        protocol: "tcp".into(),
        device_name: String::new(),
        operation: "write".into(),
        buffer_size: 1 << 30,
        batch_size: 128,
        block_size: 65536,
        threads: 1,
        duration: 10.0,
        report_unit: "GB".into(),
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
        let body = match body {
            Some(b) if !b.is_empty() => b.to_string(),
            _ => bad_flag(format!("unexpected argument {:?}", arg)),
        };
        if body == "h" || body == "help" {
            println!("{}", USAGE);
            exit(0);
        }
        let (name, value) = match body.find('=') {
            Some(i) => (body[..i].to_string(), body[i + 1..].to_string()),
            None => {
                let v = it
                    .next()
                    .unwrap_or_else(|| bad_flag(format!("flag needs an argument: -{}", body)));
                (body, v)
            }
        };
        match name.as_str() {
            "mode" => f.mode = value,
            "metadata_server" => f.metadata_server = value,
            "local_server_name" => f.local_server_name = value,
            "segment_id" => f.segment_id = value,
            "protocol" => f.protocol = value,
            "device_name" => f.device_name = value,
            "operation" => f.operation = value,
            "buffer_size" => f.buffer_size = parse_num(&name, &value),
            "batch_size" => f.batch_size = parse_num(&name, &value),
            "block_size" => f.block_size = parse_num(&name, &value),
            "threads" => f.threads = parse_num(&name, &value),
            "duration" => f.duration = parse_num(&name, &value),
            "report_unit" => f.report_unit = value,
            _ => bad_flag(format!("flag provided but not defined: -{}", name)),
        }
    }
    f
}

fn rate(f: &mut Flags, bytes: u64, d: Duration) -> String {
    let unit = match f.report_unit.as_str() {
        "GB" => 1e9,
        "GiB" => (1u64 << 30) as f64,
        "Gb" => 1e9 / 8.0,
        "MB" => 1e6,
        "MiB" => (1u64 << 20) as f64,
        "Mb" => 1e6 / 8.0,
        "KB" => 1e3,
        "KiB" => 1024.0,
        "Kb" => 1e3 / 8.0,
        _ => {
            f.report_unit = "GB".into();
            1e9
        }
    };
    format!(
        "{:.2} {}/s",
        bytes as f64 / d.as_secs_f64() / unit,
        f.report_unit
    )
}

/// Page-aligned, zeroed memory with one byte per page written, like the Go bench's anon() (an
/// mmap). Alignment matters: a Vec of this size is calloc's mmap plus a 16-byte header, so every
/// block would start 16 bytes into a cache line and copies into it run measurably slower.
struct Anon {
    ptr: *mut u8,
    layout: Layout,
}

impl Anon {
    fn new(n: u64) -> Anon {
        let layout = Layout::from_size_align(n.max(1) as usize, 4096)
            .unwrap_or_else(|e| die(format!("buffer of {} bytes: {}", n, e)));
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            die(format!("cannot allocate {} bytes", n));
        }
        let mut a = Anon { ptr, layout };
        let b = a.as_mut_slice();
        let mut i = 0usize;
        while i < b.len() {
            b[i] = (i >> 12) as u8;
            i += 4096;
        }
        a
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of layout.size() bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

// SAFETY: Anon owns its allocation exclusively (like a Box<[u8]>).
unsafe impl Send for Anon {}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in Anon::new.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

fn new_engine(f: &Flags) -> TransferEngine {
    TransferEngine::new(
        &f.local_server_name,
        &f.metadata_server,
        &f.protocol,
        &f.device_name,
    )
    .unwrap_or_else(|e| die(e.to_string()))
}

fn target(f: &Flags) {
    let e = new_engine(f);
    let buf = e
        .allocate_shared(f.buffer_size as usize)
        .unwrap_or_else(|e| die(e.to_string()));
    buf.touch(4096, 1); // fault the pages in once, as a long-running target would have
    let name = e.segment_name().unwrap_or_else(|e| die(e.to_string()));
    println!("Transfer segment: {}", name);
    println!("READY {}", name);
    std::io::stdout().flush().ok();
    // Serve until SIGINT/SIGTERM end the process (the Go runtime in a c-shared library leaves
    // their default action alone).
    loop {
        std::thread::park();
    }
}

/// Submits reqs as one batch and waits; Err(message) unless every request completed.
fn run_batch(e: &TransferEngine, reqs: &[TransferRequest]) -> Result<(), String> {
    let b = e.allocate_batch(reqs.len()).map_err(|e| e.to_string())?;
    // SAFETY: every source lies in the registered local buffer; each thread uses its own
    // disjoint range of it, and no Rust code reads or writes the buffer while transfers run.
    unsafe { b.submit(reqs) }.map_err(|e| e.to_string())?;
    match b.wait(None).map_err(|e| e.to_string())? {
        TransferStatus::Completed => Ok(()),
        s => Err(format!("batch finished as {:?}", s)),
    }
}

fn initiator(f: &mut Flags) {
    if f.segment_id.is_empty() {
        die("--segment_id is required for the initiator".into());
    }
    if f.threads == 0 || f.batch_size == 0 || f.block_size == 0 {
        die("--threads, --batch_size and --block_size must be positive".into());
    }
    let op = match f.operation.as_str() {
        "write" => Opcode::Write,
        "read" => Opcode::Read,
        o => die(format!("unknown --operation {:?}", o)),
    };
    let e = new_engine(f);
    let seg: SegmentId = e
        .open_segment(&f.segment_id)
        .unwrap_or_else(|e| die(e.to_string()));
    let remote = e.first_buffer(seg).unwrap_or_else(|e| die(e.to_string()));
    if remote == 0 {
        die(format!("segment {:?} has no buffers", f.segment_id));
    }
    let size = f.buffer_size;
    let per_thread = size / f.threads as u64;
    if per_thread < f.block_size {
        die(format!(
            "--buffer_size {} is too small for {} threads of --block_size {}",
            size, f.threads, f.block_size
        ));
    }
    let mut local = Anon::new(size);
    let mem = e
        .register_memory(local.as_mut_slice(), "cpu:0")
        .unwrap_or_else(|e| die(e.to_string()));
    let base_addr = mem.addr();
    let req = |off: u64| TransferRequest {
        opcode: op,
        source: base_addr + off,
        target: seg,
        target_addr: remote + off,
        length: f.block_size,
    };
    // Warm-up: one pass over the buffer maps the target's pages (shm) and opens connections.
    let mut warm = Vec::new();
    let mut off = 0;
    while off + f.block_size <= size {
        warm.push(req(off));
        off += f.block_size;
    }
    if let Err(m) = run_batch(&e, &warm) {
        die(format!("warm-up: {}", m));
    }
    let total = AtomicU64::new(0);
    let batches = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(f.duration.max(0.0));
    std::thread::scope(|s| {
        for th in 0..f.threads as u64 {
            let (e, total, batches, failed, req) = (&e, &total, &batches, &failed, &req);
            let (block, batch) = (f.block_size, f.batch_size);
            s.spawn(move || {
                let base = th * per_thread;
                let slots = per_thread / block;
                let mut next = 0u64;
                let mut reqs = Vec::with_capacity(batch);
                while Instant::now() < stop && !failed.load(Ordering::Relaxed) {
                    reqs.clear();
                    for _ in 0..batch {
                        reqs.push(req(base + (next % slots) * block));
                        next += 1;
                    }
                    if let Err(m) = run_batch(e, &reqs) {
                        eprintln!("batch failed: {}", m);
                        failed.store(true, Ordering::Relaxed);
                    }
                    total.fetch_add(batch as u64 * block, Ordering::Relaxed);
                    batches.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let el = start.elapsed();
    if failed.load(Ordering::Relaxed) {
        exit(1);
    }
    let tb = e.transport_bytes().unwrap_or_default();
    let via = if tb.shm > tb.tcp { "shm" } else { "tcp" };
    drop(mem);
    println!(
        "Test completed: duration {:.2}, batch count {}, transport {}, throughput {}",
        el.as_secs_f64(),
        batches.load(Ordering::Relaxed),
        via,
        rate(f, total.load(Ordering::Relaxed), el)
    );
}

/// Single-thread memcpy of --block_size blocks and a plain loopback socket copy, the yardsticks
/// for shm and tcp.
fn baseline(f: &mut Flags) {
    let size = f.buffer_size.max(f.block_size);
    let block = f.block_size as usize;
    let (mut src_mem, mut dst_mem) = (Anon::new(size), Anon::new(size));
    let src = src_mem.as_mut_slice();
    let slots = (size / f.block_size) as usize;
    let dur = Duration::from_secs_f64(f.duration.max(0.0));
    let mut n = 0u64;
    let start = Instant::now();
    let mut i = 0usize;
    while i % 64 != 0 || start.elapsed() < dur {
        let off = (i % slots) * block;
        dst_mem.as_mut_slice()[off..off + block].copy_from_slice(&src[off..off + block]);
        n += block as u64;
        i += 1;
    }
    println!("memcpy throughput {}", rate(f, n, start.elapsed()));

    let ln = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| die(e.to_string()));
    let addr = ln.local_addr().unwrap_or_else(|e| die(e.to_string()));
    let reader = std::thread::spawn(move || {
        let (mut c, _) = ln.accept().unwrap_or_else(|e| die(e.to_string()));
        let mut got = 0u64;
        let mut i = 0usize;
        loop {
            let off = (i % slots) * block;
            if c.read_exact(&mut dst_mem.as_mut_slice()[off..off + block])
                .is_err()
            {
                return got;
            }
            got += block as u64;
            i += 1;
        }
    });
    let mut c = TcpStream::connect(addr).unwrap_or_else(|e| die(e.to_string()));
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < dur {
        let off = (i % slots) * block;
        c.write_all(&src[off..off + block])
            .unwrap_or_else(|e| die(e.to_string()));
        i += 1;
    }
    drop(c);
    let got = reader.join().unwrap_or(0);
    println!("socket throughput {}", rate(f, got, start.elapsed()));
}

fn main() {
    let mut f = parse_flags(std::env::args().skip(1).collect());
    match f.mode.as_str() {
        "target" => target(&f),
        "initiator" => initiator(&mut f),
        "baseline" => baseline(&mut f),
        m => die(format!(
            "unknown --mode {:?} (initiator, target or baseline)",
            m
        )),
    }
}
