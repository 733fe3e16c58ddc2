//! `mooncake_transfer_engine`: one-sided READ/WRITE of registered memory between processes
//! and hosts, over the engine section of this repository's `libmooncake.so` C ABI
//! (`capi/include/mooncake_engine.h`).
//!
//! ```no_run
//! use mooncake_transfer_engine::{LocalRequest, Opcode, TransferEngine};
//!
//! # fn main() -> Result<(), mooncake_transfer_engine::EngineError> {
//! let engine = TransferEngine::new("127.0.0.1", "P2PHANDSHAKE", "tcp", "")?;
//! let seg = engine.open_segment("127.0.0.1:15123")?;       // the peer's segment name
//! let remote = engine.first_buffer(seg)?;                   // address of its first buffer
//! let mut buf = vec![7u8; 1 << 20];
//! let mut mem = engine.register_memory(&mut buf, "cpu:0")?;
//! engine.transfer_sync(&mut mem, &[LocalRequest {
//!     opcode: Opcode::Write, local_offset: 0, target: seg, target_addr: remote, length: 1 << 20,
//! }])?;
//! # Ok(())
//! # }
//! ```
//!
//! # Threads and memory safety
//!
//! [`TransferEngine`] is `Send + Sync`: it is a `u64` handle into the library's mutex-guarded
//! handle table, and the engine behind it is safe for concurrent use (batches, registration
//! and segment opens may come from any thread). Registered memory is borrowed by
//! [`RegisteredMemory`] for as long as it is registered, so it cannot be freed while the engine
//! may touch it. The safe transfer call, [`TransferEngine::transfer_sync`], takes the local memory
//! by `&mut` for the whole transfer and bounds-checks every request against it.
//! [`Batch::submit`] is the asynchronous, lower-level path and is `unsafe`: the caller promises
//! that no Rust reference reads or writes the local ranges until the batch finishes (the engine
//! itself rejects sources outside registered memory, `ADDRESS_NOT_REGISTERED`, -3).
#![deny(unsafe_op_in_unsafe_fn)]

// The raw C ABI: the declarations generated once, in mooncake-sys.
use mooncake_sys as sys;

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr;
use std::time::Duration;

/// The directory libmooncake.so was linked from (MOONCAKE_STORE_LIB_DIR at build time).
pub const LIB_DIR: &str = sys::LIB_DIR;

/// The engine's status codes (Mooncake's transfer engine error numbers).
pub mod codes {
    pub const INVALID_ARGUMENT: i32 = -1;
    pub const TOO_MANY_REQUESTS: i32 = -2;
    pub const ADDRESS_NOT_REGISTERED: i32 = -3;
    pub const BATCH_BUSY: i32 = -4;
    pub const DEVICE_NOT_FOUND: i32 = -6;
    pub const ADDRESS_OVERLAPPED: i32 = -7;
    pub const SOCKET: i32 = -101;
    pub const METADATA: i32 = -200;
    pub const MEMORY: i32 = -302;
    pub const NOT_IMPLEMENTED: i32 = -400;
    /// The C ABI's own invalid-parameter status.
    pub const INVALID_PARAMS: i32 = -600;
}

/// An engine error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The library returned status `code` (one of [`codes`]) with `message`.
    Failed { code: i32, message: String },
    /// An argument was rejected before the call (NUL in a string, a range outside the
    /// registered memory, an empty buffer, a batch over its capacity).
    InvalidArgument(String),
    /// A batch finished in a state other than Completed.
    Transfer(TransferStatus),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Failed { code, message } => {
                write!(f, "transfer engine: {} ({})", message, code)
            }
            EngineError::InvalidArgument(m) => write!(f, "invalid argument: {}", m),
            EngineError::Transfer(s) => write!(f, "transfer finished as {:?}", s),
        }
    }
}

impl std::error::Error for EngineError {}

impl EngineError {
    /// The library's status code, where there is one.
    pub fn code(&self) -> Option<i32> {
        match self {
            EngineError::Failed { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// `Result<T, EngineError>`.
pub type Result<T> = std::result::Result<T, EngineError>;

fn last_error_message() -> String {
    // SAFETY: NULL or a thread-local NUL-terminated string valid until this thread's next call.
    unsafe {
        let p = sys::mooncake_last_error();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

fn check(rc: i32) -> Result<()> {
    if rc >= 0 {
        Ok(())
    } else {
        Err(EngineError::Failed {
            code: rc,
            message: last_error_message(),
        })
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| EngineError::InvalidArgument(format!("{} contains a NUL byte: {:?}", what, s)))
}

fn read_string(f: impl Fn(*mut c_char, i32) -> i32) -> Result<String> {
    let mut buf = vec![0u8; 256];
    loop {
        let n = f(buf.as_mut_ptr() as *mut c_char, buf.len() as i32);
        check(n)?;
        let n = n as usize;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        buf = vec![0u8; n + 1];
    }
}

/// READ copies from the target segment into local memory, WRITE from local memory to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Read = 0,
    Write = 1,
}

/// The state of a transfer task or batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferStatus {
    Waiting,
    Pending,
    Invalid,
    Canceled,
    Completed,
    Timeout,
    Failed,
}

impl TransferStatus {
    fn from_raw(v: i32) -> TransferStatus {
        match v {
            0 => TransferStatus::Waiting,
            1 => TransferStatus::Pending,
            3 => TransferStatus::Canceled,
            4 => TransferStatus::Completed,
            5 => TransferStatus::Timeout,
            6 => TransferStatus::Failed,
            _ => TransferStatus::Invalid,
        }
    }

    /// True once the task or batch will not change any more.
    pub fn is_final(self) -> bool {
        !matches!(self, TransferStatus::Waiting | TransferStatus::Pending)
    }
}

/// An opened remote (or local) segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentId(pub u64);

/// One request of a batch, with absolute addresses (the lower-level form [`Batch::submit`] takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferRequest {
    pub opcode: Opcode,
    /// Local address inside registered memory.
    pub source: u64,
    pub target: SegmentId,
    /// Absolute address inside a registered buffer of the target segment.
    pub target_addr: u64,
    pub length: u64,
}

/// One request of [`TransferEngine::transfer_sync`], relative to a [`RegisteredMemory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRequest {
    pub opcode: Opcode,
    /// Offset into the registered memory.
    pub local_offset: usize,
    pub target: SegmentId,
    pub target_addr: u64,
    pub length: usize,
}

/// Bytes an engine has moved per transport, from [`TransferEngine::transport_bytes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportBytes {
    /// Within this process.
    pub local: u64,
    /// Shared memory with a same-host peer.
    pub shm: u64,
    pub tcp: u64,
}

impl TransportBytes {
    /// Parses the library's JSON object `{"local":n,"shm":n,"tcp":n}` (keys in any order;
    /// a missing key counts 0).
    fn parse(js: &str) -> Option<TransportBytes> {
        let body = js.trim().strip_prefix('{')?.strip_suffix('}')?;
        let mut t = TransportBytes::default();
        for field in body.split(',').filter(|f| !f.trim().is_empty()) {
            let mut kv = field.splitn(2, ':');
            let key = kv.next()?.trim().trim_matches('"');
            let val: u64 = kv.next()?.trim().parse().ok()?;
            match key {
                "local" => t.local = val,
                "shm" => t.shm = val,
                "tcp" => t.tcp = val,
                _ => {}
            }
        }
        Some(t)
    }
}

/// A transfer engine instance. The first one a process creates is the process-wide engine
/// that the store and process groups share (it lives until the process exits); later ones are
/// closed on drop.
#[derive(Debug)]
pub struct TransferEngine {
    handle: u64,
}

impl TransferEngine {
    /// Starts an engine named `local_hostname` ("host" or "host:port"; "" picks one) with
    /// `metadata_server` ("P2PHANDSHAKE", "http://h:p/metadata", "etcd://h:p", "redis://h:p"),
    /// `protocol` ("tcp", "rdma", ...) and `device_name` ("" for auto).
    pub fn new(
        local_hostname: &str,
        metadata_server: &str,
        protocol: &str,
        device_name: &str,
    ) -> Result<Self> {
        let l = cstring("local_hostname", local_hostname)?;
        let m = cstring("metadata_server", metadata_server)?;
        let p = cstring("protocol", protocol)?;
        let d = cstring("device_name", device_name)?;
        let mut h = 0u64;
        // SAFETY: NUL-terminated strings and an out pointer, alive across the call.
        check(unsafe {
            sys::mc_engine_create(l.as_ptr(), m.as_ptr(), p.as_ptr(), d.as_ptr(), &mut h)
        })?;
        Ok(TransferEngine { handle: h })
    }

    /// This engine's segment name ("host:port"), which peers open.
    pub fn segment_name(&self) -> Result<String> {
        // SAFETY: the closure's buffer is writable for its length.
        read_string(|b, n| unsafe { sys::mc_engine_segment_name(self.handle, b, n) })
    }

    /// The engine's RPC (handshake) port.
    pub fn rpc_port(&self) -> Result<u16> {
        // SAFETY: plain value argument.
        let p = unsafe { sys::mc_engine_rpc_port(self.handle) };
        check(p)?;
        Ok(p as u16)
    }

    /// Registers `buf` (NUMA/device `location`, e.g. "cpu:0"; "" or "*" for auto) so it can be
    /// a transfer source or a target of peers. Unregistered when the result is dropped.
    pub fn register_memory<'a>(
        &'a self,
        buf: &'a mut [u8],
        location: &str,
    ) -> Result<RegisteredMemory<'a>> {
        if buf.is_empty() {
            return Err(EngineError::InvalidArgument(
                "cannot register an empty buffer".into(),
            ));
        }
        let loc = cstring("location", location)?;
        // SAFETY: buf is valid for 'a, which outlives the registration (Drop unregisters).
        check(unsafe {
            sys::mc_engine_register(
                self.handle,
                buf.as_mut_ptr() as u64,
                buf.len() as u64,
                loc.as_ptr(),
            )
        })?;
        Ok(RegisteredMemory {
            engine: self,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _mem: PhantomData,
        })
    }

    /// Allocates `len` bytes of shared memory (memfd) registered with this engine, which
    /// same-host peers map and write with one memcpy. Freed when the result is dropped.
    pub fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>> {
        if len == 0 {
            return Err(EngineError::InvalidArgument(
                "cannot allocate 0 bytes".into(),
            ));
        }
        let mut addr = 0u64;
        // SAFETY: out pointer alive across the call.
        check(unsafe { sys::mc_engine_allocate_shared(self.handle, len as u64, &mut addr) })?;
        Ok(SharedBuffer {
            engine: self,
            addr,
            len,
        })
    }

    /// Opens a peer's segment by name.
    pub fn open_segment(&self, name: &str) -> Result<SegmentId> {
        let n = cstring("segment name", name)?;
        let mut seg = 0u64;
        // SAFETY: string and out pointer alive across the call.
        check(unsafe { sys::mc_engine_open_segment(self.handle, n.as_ptr(), &mut seg) })?;
        Ok(SegmentId(seg))
    }

    /// The address of the first registered buffer of an opened segment (0 if it has none).
    pub fn first_buffer(&self, seg: SegmentId) -> Result<u64> {
        let mut addr = 0u64;
        // SAFETY: out pointer alive across the call.
        check(unsafe { sys::mc_engine_first_buffer(self.handle, seg.0, &mut addr) })?;
        Ok(addr)
    }

    /// A batch for up to `capacity` requests; freed on drop (after it finishes).
    pub fn allocate_batch(&self, capacity: usize) -> Result<Batch<'_>> {
        let cap = i32::try_from(capacity)
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| {
                EngineError::InvalidArgument(format!("batch capacity {} out of range", capacity))
            })?;
        let mut id = 0u64;
        // SAFETY: out pointer alive across the call.
        check(unsafe { sys::mc_engine_allocate_batch(self.handle, cap, &mut id) })?;
        Ok(Batch {
            engine: self,
            id,
            capacity,
        })
    }

    /// Runs `reqs` against the local memory `mem` and waits for them: Ok when every request
    /// completed. Each request's local range is checked to lie inside `mem`.
    pub fn transfer_sync(
        &self,
        mem: &mut RegisteredMemory<'_>,
        reqs: &[LocalRequest],
    ) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let mut abs = Vec::with_capacity(reqs.len());
        for r in reqs {
            if r.length == 0
                || r.local_offset
                    .checked_add(r.length)
                    .map_or(true, |e| e > mem.len)
            {
                return Err(EngineError::InvalidArgument(format!(
                    "local range {}+{} is empty or outside the {}-byte memory",
                    r.local_offset, r.length, mem.len
                )));
            }
            abs.push(TransferRequest {
                opcode: r.opcode,
                source: mem.addr() + r.local_offset as u64,
                target: r.target,
                target_addr: r.target_addr,
                length: r.length as u64,
            });
        }
        let batch = self.allocate_batch(abs.len())?;
        // SAFETY: every source lies in `mem`, exclusively borrowed until the batch has finished
        // (wait below; Batch's Drop waits too if wait returns early with an error).
        unsafe { batch.submit(&abs)? };
        match batch.wait(None)? {
            TransferStatus::Completed => Ok(()),
            s => Err(EngineError::Transfer(s)),
        }
    }

    /// Bytes this engine has moved through each transport so far (which transport reached a
    /// peer: same-host peers go through shm unless MC_FORCE_TCP=1).
    pub fn transport_bytes(&self) -> Result<TransportBytes> {
        // SAFETY: the closure's buffer is writable for its length.
        let js = read_string(|b, n| unsafe { sys::mc_engine_transport_bytes(self.handle, b, n) })?;
        TransportBytes::parse(&js).ok_or_else(|| EngineError::Failed {
            code: codes::INVALID_ARGUMENT,
            message: format!("unexpected transport byte counts {:?}", js),
        })
    }

    /// Sends a notification (`name`, `msg`) to an opened segment's engine.
    pub fn send_notify(&self, seg: SegmentId, name: &str, msg: &str) -> Result<()> {
        let n = cstring("name", name)?;
        let m = cstring("msg", msg)?;
        // SAFETY: strings alive across the call.
        check(unsafe { sys::mc_engine_send_notify(self.handle, seg.0, n.as_ptr(), m.as_ptr()) })
    }

    /// Drains received notifications as JSON `[{"name":..,"msg":..}]`.
    pub fn get_notifies(&self) -> Result<String> {
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: buf is writable for its length.
        let n = unsafe {
            sys::mc_engine_get_notifies(
                self.handle,
                buf.as_mut_ptr() as *mut c_char,
                buf.len() as i32,
            )
        };
        check(n)?;
        buf.truncate((n as usize).min(buf.len() - 1));
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// This host's topology (priority matrix) as JSON.
    pub fn topology(&self) -> Result<String> {
        // SAFETY: the closure's buffer is writable for its length.
        read_string(|b, n| unsafe { sys::mc_engine_topology(self.handle, b, n) })
    }
}

impl Drop for TransferEngine {
    fn drop(&mut self) {
        // SAFETY: plain value; the handle is not used again.
        unsafe { sys::mc_engine_destroy(self.handle) };
    }
}

/// Memory registered with an engine; unregistered on drop. It borrows the memory mutably and
/// the engine immutably, so neither goes away while it is registered.
pub struct RegisteredMemory<'a> {
    engine: &'a TransferEngine,
    ptr: *mut u8,
    len: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

// SAFETY: an exclusive borrow of plain bytes plus a &TransferEngine (Sync), like &mut [u8].
unsafe impl Send for RegisteredMemory<'_> {}
unsafe impl Sync for RegisteredMemory<'_> {}

impl fmt::Debug for RegisteredMemory<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredMemory")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl RegisteredMemory<'_> {
    /// The start address (what requests' `source` refers to).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (empty buffers cannot be registered).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr/len come from the borrowed &mut [u8].
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for RegisteredMemory<'_> {
    fn drop(&mut self) {
        // SAFETY: plain values; the address was registered by register_memory.
        unsafe { sys::mc_engine_unregister(self.engine.handle, self.ptr as u64) };
    }
}

/// Shared memory the engine allocated and registered; peers read and write it at any time, so
/// it is reached through copies, not Rust references. Freed on drop.
#[derive(Debug)]
pub struct SharedBuffer<'a> {
    engine: &'a TransferEngine,
    addr: u64,
    len: usize,
}

impl SharedBuffer<'_> {
    /// The start address (what peers target).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_range(&self, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).map_or(true, |e| e > self.len) {
            return Err(EngineError::InvalidArgument(format!(
                "range {}+{} is outside the {}-byte shared buffer",
                offset, n, self.len
            )));
        }
        Ok(())
    }

    /// Copies `out.len()` bytes from `offset` into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        // SAFETY: the range lies in the mapping, alive while self is; bytes have no invalid values.
        unsafe {
            ptr::copy_nonoverlapping(
                (self.addr as usize + offset) as *const u8,
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        // SAFETY: as in read_at.
        unsafe {
            ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.addr as usize + offset) as *mut u8,
                data.len(),
            )
        };
        Ok(())
    }

    /// Writes one byte at every `step`-th offset (faults the pages in, as a long-running
    /// target would have them).
    pub fn touch(&self, step: usize, value: u8) {
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, inside the mapping.
            unsafe { ptr::write_volatile((self.addr as usize + off) as *mut u8, value) };
            off += step.max(1);
        }
    }
}

impl Drop for SharedBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: plain values; the address came from allocate_shared.
        unsafe { sys::mc_engine_free_shared(self.engine.handle, self.addr) };
    }
}

/// A batch of transfer requests. Dropping it waits for unfinished requests, then frees it.
#[derive(Debug)]
pub struct Batch<'a> {
    engine: &'a TransferEngine,
    id: u64,
    capacity: usize,
}

impl Batch<'_> {
    /// Submits `reqs` (at most the batch's capacity in all) without waiting.
    ///
    /// # Safety
    /// Every request's local range `[source, source+length)` must lie in memory registered with
    /// this engine that stays registered, and that no Rust code reads (for READ) or writes (for
    /// WRITE) until the batch has finished ([`wait`](Self::wait) returned a final status, or the
    /// batch was dropped).
    pub unsafe fn submit(&self, reqs: &[TransferRequest]) -> Result<()> {
        if reqs.len() > self.capacity {
            return Err(EngineError::InvalidArgument(format!(
                "{} requests for a batch of capacity {}",
                reqs.len(),
                self.capacity
            )));
        }
        let ops: Vec<i32> = reqs.iter().map(|r| r.opcode as i32).collect();
        let srcs: Vec<u64> = reqs.iter().map(|r| r.source).collect();
        let segs: Vec<u64> = reqs.iter().map(|r| r.target.0).collect();
        let tgts: Vec<u64> = reqs.iter().map(|r| r.target_addr).collect();
        let lens: Vec<u64> = reqs.iter().map(|r| r.length).collect();
        // SAFETY: five arrays of reqs.len() elements; the memory contract is the caller's.
        check(unsafe {
            sys::mc_engine_submit(
                self.engine.handle,
                self.id,
                reqs.len() as i32,
                ops.as_ptr(),
                srcs.as_ptr(),
                segs.as_ptr(),
                tgts.as_ptr(),
                lens.as_ptr(),
                ptr::null(),
                ptr::null(),
            )
        })
    }

    /// Waits up to `timeout` (None: the engine's transfer timeout) for the batch to finish and
    /// returns its status.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<TransferStatus> {
        let ms = timeout.map_or(-1, |d| d.as_millis().min(i64::MAX as u128) as i64);
        let mut st = 0i32;
        // SAFETY: out pointer alive across the call.
        let rc = unsafe { sys::mc_engine_wait_batch(self.engine.handle, self.id, ms, &mut st) };
        let st = TransferStatus::from_raw(st);
        if rc < 0 && !st.is_final() {
            check(rc)?;
        }
        Ok(st)
    }

    /// The batch's status now.
    pub fn status(&self) -> Result<TransferStatus> {
        let mut st = 0i32;
        // SAFETY: out pointer alive across the call.
        check(unsafe { sys::mc_engine_batch_status(self.engine.handle, self.id, &mut st) })?;
        Ok(TransferStatus::from_raw(st))
    }

    /// Request `task`'s status and bytes transferred.
    pub fn task_status(&self, task: usize) -> Result<(TransferStatus, u64)> {
        let mut st = 0i32;
        let mut n = 0u64;
        // SAFETY: out pointers alive across the call.
        check(unsafe {
            sys::mc_engine_task_status(self.engine.handle, self.id, task as i32, &mut st, &mut n)
        })?;
        Ok((TransferStatus::from_raw(st), n))
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // Local memory of unfinished requests must not be released before they finish: wait,
        // then free (BATCH_BUSY means some request is still running).
        loop {
            // SAFETY: plain values.
            let rc = unsafe { sys::mc_engine_free_batch(self.engine.handle, self.id) };
            if rc != codes::BATCH_BUSY {
                return;
            }
            let mut st = 0i32;
            // SAFETY: out pointer alive across the call.
            unsafe { sys::mc_engine_wait_batch(self.engine.handle, self.id, 1000, &mut st) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_errors() {
        assert_eq!(TransferStatus::from_raw(4), TransferStatus::Completed);
        assert_eq!(TransferStatus::from_raw(6), TransferStatus::Failed);
        assert_eq!(TransferStatus::from_raw(42), TransferStatus::Invalid);
        assert!(!TransferStatus::Pending.is_final());
        assert!(TransferStatus::Timeout.is_final());
        let e = EngineError::Failed {
            code: -3,
            message: "address not registered".into(),
        };
        assert_eq!(
            e.to_string(),
            "transfer engine: address not registered (-3)"
        );
        assert_eq!(e.code(), Some(-3));
        assert_eq!(
            EngineError::Transfer(TransferStatus::Failed).to_string(),
            "transfer finished as Failed"
        );
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<TransferEngine>();
        assert_send_sync::<RegisteredMemory<'static>>();
    }

    #[test]
    fn transport_bytes_json() {
        assert_eq!(
            TransportBytes::parse(r#"{"local":1,"shm":22,"tcp":333}"#),
            Some(TransportBytes {
                local: 1,
                shm: 22,
                tcp: 333
            })
        );
        assert_eq!(
            TransportBytes::parse(r#"{ "tcp": 5 }"#),
            Some(TransportBytes {
                tcp: 5,
                ..Default::default()
            })
        );
        assert_eq!(TransportBytes::parse("{}"), Some(TransportBytes::default()));
        assert_eq!(TransportBytes::parse(r#"{"shm":-1}"#), None);
        assert_eq!(TransportBytes::parse("[]"), None);
    }

    #[test]
    fn two_engines_in_one_process() {
        let target = TransferEngine::new("127.0.0.1", "P2PHANDSHAKE", "tcp", "").unwrap();
        let init = TransferEngine::new("127.0.0.1", "P2PHANDSHAKE", "tcp", "").unwrap();
        let shared = target.allocate_shared(1 << 20).unwrap();
        let name = target.segment_name().unwrap();
        assert!(name.starts_with("127.0.0.1:"), "{}", name);
        let seg = init.open_segment(&name).unwrap();
        assert_eq!(init.first_buffer(seg).unwrap(), shared.addr());

        let mut buf: Vec<u8> = (0..(64u32 << 10)).map(|i| (i * 7 % 251) as u8).collect();
        let want = buf.clone();
        let mut mem = init.register_memory(&mut buf, "cpu:0").unwrap();
        let w = LocalRequest {
            opcode: Opcode::Write,
            local_offset: 0,
            target: seg,
            target_addr: shared.addr(),
            length: 64 << 10,
        };
        init.transfer_sync(&mut mem, &[w]).unwrap();
        let mut got = vec![0u8; 64 << 10];
        shared.read_at(0, &mut got).unwrap();
        assert_eq!(got, want);
        shared.write_at(4096, b"from the target").unwrap();

        mem.as_mut_slice().iter_mut().for_each(|b| *b = 0);
        let r = LocalRequest {
            opcode: Opcode::Read,
            local_offset: 100,
            target: seg,
            target_addr: shared.addr() + 4096,
            length: 15,
        };
        init.transfer_sync(&mut mem, &[r]).unwrap();
        assert_eq!(&mem.as_slice()[100..115], b"from the target");
        assert!(mem.as_slice()[..100].iter().all(|b| *b == 0));

        // Out of the local memory: refused before the call.
        let bad = LocalRequest {
            local_offset: 64 << 10,
            length: 1,
            ..r
        };
        match init.transfer_sync(&mut mem, &[bad]) {
            Err(EngineError::InvalidArgument(m)) => {
                assert_eq!(
                    m,
                    "local range 65536+1 is empty or outside the 65536-byte memory"
                )
            }
            other => panic!("{:?}", other),
        }
        // Outside the target's registered memory: the engine's error.
        let beyond = LocalRequest {
            target_addr: shared.addr() + (1 << 20),
            ..r
        };
        let err = init.transfer_sync(&mut mem, &[beyond]).unwrap_err();
        assert!(
            matches!(err, EngineError::Failed { .. } | EngineError::Transfer(_)),
            "{:?}",
            err
        );
        drop(mem);
        let tb = init.transport_bytes().unwrap();
        assert!(tb.shm + tb.tcp + tb.local >= (64 << 10) + 15, "{:?}", tb);
        assert!(matches!(
            init.open_segment("a\0b"),
            Err(EngineError::InvalidArgument(_))
        ));
    }
}
