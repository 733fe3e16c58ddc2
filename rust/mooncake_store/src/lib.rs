//! `mooncake_store`: a client of Mooncake Store (a distributed KV cache for LLM serving) over the
//! C ABI of this repository's `libmooncake.so` (`capi/include/mooncake_store.h`).
//!
//! ```no_run
//! use mooncake_store::{MooncakeStore, ReplicateConfig, StoreError};
//!
//! # fn main() -> Result<(), StoreError> {
//! let store = MooncakeStore::new()?;
//! store.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 128 << 20, "tcp", "", "127.0.0.1:50051")?;
//! store.put("my-key", b"hello, mooncake!", None)?;
//! let config = ReplicateConfig { replica_num: 2, ..ReplicateConfig::default() };
//! store.put("replicated-key", b"replicated value", Some(&config))?;
//! assert!(store.is_exist("my-key")?);
//! assert_eq!(store.get_size("my-key")?, 16);
//! assert_eq!(store.get("my-key")?, b"hello, mooncake!");
//! store.remove("my-key", false)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Threads
//!
//! [`MooncakeStore`] is `Send + Sync`: share it between threads with `&` or `Arc`. This is sound
//! because the value is only a `u64` handle into the library's handle table (guarded by a mutex
//! in the library), every `mc_store_*` entry point may be called from any thread at the same
//! time (the Go client behind a handle is safe for concurrent use; setup and close take the
//! handle's own lock), no call keeps a pointer to the caller's memory after it returns except
//! registered buffers (whose lifetimes [`RegisteredBuffer`] ties to the memory and the store),
//! and the error message (`mooncake_last_error`, thread-local in the library) is read on the
//! calling thread right after the failing call. [`RegisteredBuffer`] is `Send + Sync` like the
//! `&mut [u8]` it holds: `&self` methods only read the memory, writes need `&mut self`.
//!
//! # Errors
//!
//! Every fallible call returns [`Result<T, StoreError>`](StoreError): `OperationFailed(code)`
//! with a code of [`codes`] (a missing key: `OperationFailed(codes::OBJECT_NOT_FOUND)`, -704),
//! `SetupError(msg)` from [`MooncakeStore::setup`], `InvalidArgument(msg)` for arguments
//! rejected before the call (empty key, NUL in a string, zero-length buffer, mismatched batch
//! lengths) or by the library (INVALID_PARAMS, -600). [`last_error_message`] returns the
//! library's message for the calling thread's last failure.
#![deny(unsafe_op_in_unsafe_fn)]

mod error;

// The raw C ABI: the declarations generated once, in mooncake-sys.
use mooncake_sys as sys;

pub use error::{code_name, codes, Result, StoreError};

use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::ops::Range;
use std::os::raw::c_char;
use std::ptr;

/// The directory libmooncake.so was linked from (MOONCAKE_STORE_LIB_DIR at build time).
pub const LIB_DIR: &str = sys::LIB_DIR;

/// Longest key the store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// The library's message for the calling thread's last failed call ("" when none).
pub fn last_error_message() -> String {
    // SAFETY: mooncake_last_error returns NULL or a NUL-terminated thread-local string that
    // stays valid until this thread's next call into the library; it is copied at once.
    unsafe {
        let p = sys::mooncake_last_error();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The library's version string.
pub fn version() -> String {
    // SAFETY: a static NUL-terminated string owned by the library.
    unsafe {
        let p = sys::mooncake_version();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// Maps a status (0 ok, <0 error) to a Result.
fn check(rc: i64) -> Result<()> {
    if rc >= 0 {
        Ok(())
    } else {
        Err(status_error(rc))
    }
}

fn status_error(rc: i64) -> StoreError {
    let code = i32::try_from(rc).unwrap_or(codes::INTERNAL_ERROR);
    if code == codes::INVALID_PARAMS {
        StoreError::InvalidArgument(last_error_message())
    } else {
        StoreError::OperationFailed(code)
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| StoreError::InvalidArgument(format!("{} contains a NUL byte: {:?}", what, s)))
}

/// Checks and converts a key: 1..=4096 bytes of UTF-8 without NUL.
fn ckey(key: &str) -> Result<CString> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument("key is empty".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::InvalidArgument(format!(
            "key is {} bytes, the limit is {}",
            key.len(),
            MAX_KEY_LEN
        )));
    }
    cstring("key", key)
}

fn ckeys<K: AsRef<str>>(keys: &[K]) -> Result<(Vec<CString>, Vec<*const c_char>)> {
    let owned = keys
        .iter()
        .map(|k| ckey(k.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    let ptrs = owned.iter().map(|k| k.as_ptr()).collect();
    Ok((owned, ptrs))
}

fn batch_len(n: usize) -> Result<i32> {
    i32::try_from(n)
        .map_err(|_| StoreError::InvalidArgument(format!("batch of {} is too large", n)))
}

fn same_len(what: &str, keys: usize, other: usize) -> Result<()> {
    if keys != other {
        return Err(StoreError::InvalidArgument(format!(
            "{} keys but {} {}",
            keys, other, what
        )));
    }
    Ok(())
}

/// How a put is placed. The default is one replica, no pins, no preferred segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicateConfig {
    /// Number of replicas, each on a distinct segment (at least 1).
    pub replica_num: usize,
    /// Evicted last under memory pressure.
    pub with_soft_pin: bool,
    /// Never evicted.
    pub with_hard_pin: bool,
    /// Segment names ("host:port") tried first.
    pub preferred_segments: Vec<String>,
}

impl Default for ReplicateConfig {
    fn default() -> Self {
        ReplicateConfig {
            replica_num: 1,
            with_soft_pin: false,
            with_hard_pin: false,
            preferred_segments: Vec::new(),
        }
    }
}

/// A ReplicateConfig in C form, with the string it points to.
struct CConfig {
    raw: sys::mc_replicate_config,
    _segments: Option<CString>,
}

impl CConfig {
    fn new(cfg: Option<&ReplicateConfig>) -> Result<Option<CConfig>> {
        let cfg = match cfg {
            None => return Ok(None),
            Some(c) => c,
        };
        if cfg.replica_num == 0 {
            return Err(StoreError::InvalidArgument(
                "replica_num must be at least 1".into(),
            ));
        }
        let replica_num = i32::try_from(cfg.replica_num).map_err(|_| {
            StoreError::InvalidArgument(format!("replica_num {} is too large", cfg.replica_num))
        })?;
        if let Some(s) = cfg
            .preferred_segments
            .iter()
            .find(|s| s.is_empty() || s.contains(','))
        {
            return Err(StoreError::InvalidArgument(format!(
                "preferred segment {:?} is empty or contains a comma",
                s
            )));
        }
        let segments = if cfg.preferred_segments.is_empty() {
            None
        } else {
            Some(cstring(
                "preferred_segments",
                &cfg.preferred_segments.join(","),
            )?)
        };
        Ok(Some(CConfig {
            raw: sys::mc_replicate_config {
                replica_num,
                with_soft_pin: cfg.with_soft_pin as i32,
                with_hard_pin: cfg.with_hard_pin as i32,
                preferred_segments: segments.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
                // the C ABI's newer options, at their defaults (zero)
                soft_pin_action: 0,
                has_soft_pin_ttl: 0,
                soft_pin_ttl_ms: 0,
                prefer_alloc_in_same_node: 0,
            },
            _segments: segments,
        }))
    }
}

fn cfg_ptr(c: &Option<CConfig>) -> *const sys::mc_replicate_config {
    c.as_ref().map_or(ptr::null(), |c| &c.raw as *const _)
}

/// The items of a request in C form (`mc_store_item`: a key and its parts), with the keys and
/// part arrays they point to.
struct CItems {
    raw: Vec<sys::mc_store_item>,
    _keys: Vec<CString>,
    _addrs: Vec<u64>,
    _lens: Vec<u64>,
}

impl CItems {
    /// Item i is keys[i] with the parts parts[i] ((address, length) pairs; none when parts is
    /// shorter).
    fn new<K: AsRef<str>>(keys: &[K], parts: &[Vec<(u64, u64)>]) -> Result<CItems> {
        batch_len(keys.len())?;
        let owned = keys
            .iter()
            .map(|k| ckey(k.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let addrs: Vec<u64> = parts.iter().flatten().map(|p| p.0).collect();
        let lens: Vec<u64> = parts.iter().flatten().map(|p| p.1).collect();
        let mut raw = Vec::with_capacity(owned.len());
        let mut off = 0;
        for (i, k) in owned.iter().enumerate() {
            let np = parts.get(i).map_or(0, |p| p.len());
            let (a, l) = if np == 0 {
                (ptr::null(), ptr::null())
            } else {
                (addrs[off..].as_ptr(), lens[off..].as_ptr())
            };
            raw.push(sys::mc_store_item {
                key: k.as_ptr(),
                addrs: a,
                lens: l,
                nparts: batch_len(np)?,
            });
            off += np;
        }
        Ok(CItems {
            raw,
            _keys: owned,
            _addrs: addrs,
            _lens: lens,
        })
    }

    fn len(&self) -> usize {
        self.raw.len()
    }
}

/// One part over a slice: its (address, length).
fn part(b: &[u8]) -> Vec<(u64, u64)> {
    vec![(b.as_ptr() as u64, b.len() as u64)]
}

/// The result of a call's only item.
fn one<T>(r: Result<Vec<Result<T>>>) -> Result<T> {
    r?.into_iter()
        .next()
        .unwrap_or(Err(StoreError::OperationFailed(codes::INTERNAL_ERROR)))
}

/// The store's view of its master connection, from [`MooncakeStore::health_check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    NotSetUp,
    MasterUnreachable,
}

/// A client of Mooncake Store. Create with [`new`](Self::new), connect with
/// [`setup`](Self::setup); dropping it (or [`close`](Self::close)) unmounts its segment (replicas
/// on other segments survive). `Send + Sync`: see the crate documentation.
#[derive(Debug)]
pub struct MooncakeStore {
    handle: u64,
}

/// The allocator mc_store_get calls for item i: reserves the value's size in slot i of the
/// Vec<Vec<u8>> behind ctx.
unsafe extern "C" fn alloc_vecs(ctx: *mut c_void, i: i32, len: u64) -> *mut c_void {
    // SAFETY: ctx is the &mut Vec<Vec<u8>> (one slot per key) that `batch_get` passes, alive
    // for the whole call.
    let vals = unsafe { &mut *(ctx as *mut Vec<Vec<u8>>) };
    // (match, not let-else: the crate builds with Rust 1.63.)
    let (i, n) = match (usize::try_from(i), usize::try_from(len)) {
        (Ok(i), Ok(n)) => (i, n),
        _ => return ptr::null_mut(),
    };
    let v = match vals.get_mut(i) {
        Some(v) => v,
        None => return ptr::null_mut(),
    };
    v.clear();
    if v.try_reserve_exact(n).is_err() {
        return ptr::null_mut();
    }
    v.as_mut_ptr() as *mut c_void
}

impl MooncakeStore {
    /// Creates an unconnected store handle.
    pub fn new() -> Result<Self> {
        let mut h = 0u64;
        // SAFETY: h is a valid out pointer.
        check(unsafe { sys::mc_store_create(&mut h) }.into())?;
        Ok(MooncakeStore { handle: h })
    }

    /// Connects to `mooncake_master` at `master_server_address` ("host:port"): starts (or
    /// reuses) the process's transfer engine on `local_hostname` with `metadata_server`
    /// ("P2PHANDSHAKE", "http://h:p/metadata", "etcd://h:p", "redis://h:p"), `protocol` ("tcp",
    /// "rdma", ...) and `device_name` ("" for auto), mounts `global_segment_size` bytes of this
    /// process's memory into the store (0: contribute none) and allocates a `local_buffer_size`
    /// staging buffer (0: 16 MiB).
    #[allow(clippy::too_many_arguments)]
    pub fn setup(
        &self,
        local_hostname: &str,
        metadata_server: &str,
        global_segment_size: u64,
        local_buffer_size: u64,
        protocol: &str,
        device_name: &str,
        master_server_address: &str,
    ) -> Result<()> {
        if master_server_address.is_empty() {
            return Err(StoreError::InvalidArgument(
                "master_server_address is empty (want host:port of mooncake_master)".into(),
            ));
        }
        let local = cstring("local_hostname", local_hostname)?;
        let meta = cstring("metadata_server", metadata_server)?;
        let proto = cstring("protocol", protocol)?;
        let dev = cstring("device_name", device_name)?;
        let master = cstring("master_server_address", master_server_address)?;
        // SAFETY: every pointer is a NUL-terminated string alive across the call.
        let rc = unsafe {
            sys::mc_store_setup(
                self.handle,
                local.as_ptr(),
                meta.as_ptr(),
                global_segment_size,
                local_buffer_size,
                proto.as_ptr(),
                dev.as_ptr(),
                master.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(StoreError::SetupError(format!(
                "{} ({}, {})",
                last_error_message(),
                code_name(rc),
                rc
            )));
        }
        Ok(())
    }

    /// Whether the store is set up and its master answers.
    pub fn health_check(&self) -> Health {
        // SAFETY: plain value arguments.
        match unsafe { sys::mc_store_health_check(self.handle) } {
            0 => Health::Healthy,
            1 => Health::NotSetUp,
            _ => Health::MasterUnreachable,
        }
    }

    /// The name of this client's segment ("host:port").
    pub fn hostname(&self) -> Result<String> {
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: buf is writable for buf.len() bytes.
            let n = unsafe {
                sys::mc_store_get_hostname(
                    self.handle,
                    buf.as_mut_ptr() as *mut c_char,
                    buf.len() as i32,
                )
            };
            check(n.into())?;
            let n = n as usize;
            if n < buf.len() {
                buf.truncate(n);
                return String::from_utf8(buf)
                    .map_err(|_| StoreError::OperationFailed(codes::INTERNAL_ERROR));
            }
            buf = vec![0u8; n + 1];
        }
    }

    /// Stores `value` under `key` (write-once: a put of an existing key succeeds without
    /// rewriting it). `config`: `None` for one replica without pins.
    pub fn put(&self, key: &str, value: &[u8], config: Option<&ReplicateConfig>) -> Result<()> {
        // SAFETY: value is readable for its length across the call.
        one(unsafe { self.put_items(&CItems::new(&[key], &[part(value)])?, config) })
    }

    /// Stores the concatenation of `parts` under `key` without joining them first.
    pub fn put_parts(
        &self,
        key: &str,
        parts: &[&[u8]],
        config: Option<&ReplicateConfig>,
    ) -> Result<()> {
        batch_len(parts.len())?;
        let ps = parts
            .iter()
            .map(|p| (p.as_ptr() as u64, p.len() as u64))
            .collect();
        // SAFETY: every part is readable for its length across the call.
        one(unsafe { self.put_items(&CItems::new(&[key], &[ps])?, config) })
    }

    /// Runs mc_store_put (write-once) on items. The outer error is for a call that could not
    /// run; the inner results are per item.
    ///
    /// # Safety
    /// Every part of every item must be readable for its length for the duration of the call.
    unsafe fn put_items(
        &self,
        items: &CItems,
        config: Option<&ReplicateConfig>,
    ) -> Result<Vec<Result<()>>> {
        let c = CConfig::new(config)?;
        let mut res = vec![0i32; items.len()];
        // SAFETY: the caller's contract; items, c and res (one slot per item) live across the
        // call.
        check(
            unsafe {
                sys::mc_store_put(
                    self.handle,
                    items.raw.as_ptr(),
                    items.len() as i32,
                    cfg_ptr(&c),
                    0,
                    res.as_mut_ptr(),
                )
            }
            .into(),
        )?;
        Ok(res.into_iter().map(|r| check(r.into())).collect())
    }

    /// Returns the value of `key`, read once into a Vec of exactly its size.
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        one(self.batch_get(&[key]))
    }

    /// Reads `key` into `buf` and returns the value's length; `OperationFailed(BUFFER_OVERFLOW)`
    /// when `buf` is too small. Zero-copy when `buf` lies in a [`RegisteredBuffer`] (use
    /// [`RegisteredBuffer::as_mut_slice`] or [`RegisteredBuffer::get_into`]).
    pub fn get_into(&self, key: &str, buf: &mut [u8]) -> Result<usize> {
        ckey(key)?;
        if buf.is_empty() {
            return Err(StoreError::InvalidArgument(
                "get_into needs a non-empty buffer".into(),
            ));
        }
        let items = CItems::new(&[key], &[part(buf)])?;
        // SAFETY: buf is writable for its length and exclusively borrowed across the call.
        one(unsafe { self.get_items(&items, None, ptr::null_mut()) })
    }

    /// Runs mc_store_get on items: into their parts, or with alloc into memory it gives. The
    /// outer error is for a call that could not run; per item the value's size or its error.
    ///
    /// # Safety
    /// Every part of every item must be writable for its length for the duration of the call,
    /// and alloc must be sound to call with ctx.
    unsafe fn get_items(
        &self,
        items: &CItems,
        alloc: sys::mc_store_alloc_fn,
        ctx: *mut c_void,
    ) -> Result<Vec<Result<usize>>> {
        let mut sizes = vec![0u64; items.len()];
        let mut res = vec![0i32; items.len()];
        // SAFETY: the caller's contract; items, sizes and res (one slot per item) live across
        // the call.
        check(
            unsafe {
                sys::mc_store_get(
                    self.handle,
                    items.raw.as_ptr(),
                    items.len() as i32,
                    alloc,
                    ctx,
                    sizes.as_mut_ptr(),
                    res.as_mut_ptr(),
                )
            }
            .into(),
        )?;
        Ok(res
            .into_iter()
            .zip(sizes)
            .map(|(r, n)| check(r.into()).map(|_| n as usize))
            .collect())
    }

    /// The size of `key`'s value in bytes.
    pub fn get_size(&self, key: &str) -> Result<u64> {
        match one(self.exist_sizes(&[key]))? {
            0 => Err(StoreError::OperationFailed(codes::OBJECT_NOT_FOUND)),
            n => Ok(n),
        }
    }

    /// Whether `key` exists.
    pub fn is_exist(&self, key: &str) -> Result<bool> {
        one(self.batch_is_exist(&[key]))
    }

    /// Removes `key`; `force` removes it even while a reader holds a lease on it.
    pub fn remove(&self, key: &str, force: bool) -> Result<()> {
        one(self.batch_remove(&[key], force))
    }

    /// Removes every key matching the regular expression `pattern` (RE2 syntax); returns how many.
    pub fn remove_by_regex(&self, pattern: &str, force: bool) -> Result<u64> {
        let p = cstring("pattern", pattern)?;
        // SAFETY: p lives across the call.
        let n = unsafe { sys::mc_store_remove_by_regex(self.handle, p.as_ptr(), force as i32) };
        check(n)?;
        Ok(n as u64)
    }

    /// Removes every key; returns how many.
    pub fn remove_all(&self) -> Result<u64> {
        // SAFETY: plain value arguments (keep_held 0: leased and hard-pinned keys go too).
        let n = unsafe { sys::mc_store_remove_all(self.handle, 0) };
        check(n)?;
        Ok(n as u64)
    }

    /// Stores `values[i]` under `keys[i]`. The outer error is for a batch that could not run;
    /// the inner results are per key.
    pub fn batch_put<K: AsRef<str>>(
        &self,
        keys: &[K],
        values: &[&[u8]],
        config: Option<&ReplicateConfig>,
    ) -> Result<Vec<Result<()>>> {
        same_len("values", keys.len(), values.len())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let parts: Vec<_> = values.iter().map(|v| part(v)).collect();
        // SAFETY: every value is readable for its length across the call.
        unsafe { self.put_items(&CItems::new(keys, &parts)?, config) }
    }

    /// Returns each key's value or error. The outer error is for a batch that could not run.
    pub fn batch_get<K: AsRef<str>>(&self, keys: &[K]) -> Result<Vec<Result<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let items = CItems::new(keys, &[])?;
        let mut vals: Vec<Vec<u8>> = (0..keys.len()).map(|_| Vec::new()).collect();
        // SAFETY: the items have no parts; alloc_vecs gets &mut vals (one slot per key) as ctx
        // and returns slot i's reserved storage, which the library fills with the value's size
        // when item i succeeds.
        let got = unsafe {
            self.get_items(
                &items,
                Some(alloc_vecs),
                &mut vals as *mut Vec<Vec<u8>> as *mut c_void,
            )
        }?;
        let out = vals
            .into_iter()
            .zip(got)
            .map(|(mut v, r)| {
                let len = r?;
                if len > v.capacity() {
                    return Err(StoreError::OperationFailed(codes::INTERNAL_ERROR));
                }
                // SAFETY: the library wrote len bytes into v's storage (len <= capacity).
                unsafe { v.set_len(len) };
                Ok(v)
            })
            .collect();
        Ok(out)
    }

    /// Reads `keys[i]` into `bufs[i]`; per key the value's length or its error.
    pub fn batch_get_into<K: AsRef<str>>(
        &self,
        keys: &[K],
        bufs: &mut [&mut [u8]],
    ) -> Result<Vec<Result<usize>>> {
        same_len("buffers", keys.len(), bufs.len())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if bufs.iter().any(|b| b.is_empty()) {
            return Err(StoreError::InvalidArgument(
                "batch_get_into needs non-empty buffers".into(),
            ));
        }
        let parts: Vec<_> = bufs.iter().map(|b| part(b)).collect();
        // SAFETY: every buffer is writable for its length and exclusively borrowed.
        unsafe { self.get_items(&CItems::new(keys, &parts)?, None, ptr::null_mut()) }
    }

    /// Per key: the size of its value, 0 when it does not exist, or its error.
    fn exist_sizes<K: AsRef<str>>(&self, keys: &[K]) -> Result<Vec<Result<u64>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (_owned, kp) = ckeys(keys)?;
        let n = batch_len(keys.len())?;
        let mut res = vec![0i64; keys.len()];
        // SAFETY: n keys; res has n slots.
        check(
            unsafe { sys::mc_store_is_exist(self.handle, kp.as_ptr(), n, res.as_mut_ptr()) }.into(),
        )?;
        Ok(res
            .into_iter()
            .map(|r| check(r).map(|_| r as u64))
            .collect())
    }

    /// Per key: whether it exists, or its error.
    pub fn batch_is_exist<K: AsRef<str>>(&self, keys: &[K]) -> Result<Vec<Result<bool>>> {
        Ok(self
            .exist_sizes(keys)?
            .into_iter()
            .map(|r| r.map(|n| n > 0))
            .collect())
    }

    /// Removes each key; per key its result.
    pub fn batch_remove<K: AsRef<str>>(&self, keys: &[K], force: bool) -> Result<Vec<Result<()>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (_owned, kp) = ckeys(keys)?;
        let n = batch_len(keys.len())?;
        let mut res = vec![0i32; keys.len()];
        // SAFETY: n keys; res has n slots.
        check(
            unsafe {
                sys::mc_store_remove(self.handle, kp.as_ptr(), n, force as i32, res.as_mut_ptr())
            }
            .into(),
        )?;
        Ok(res.into_iter().map(|r| check(r.into())).collect())
    }

    /// Registers `buf` with the store's transfer engine, so puts from it and gets into it move
    /// data without a staging copy. The buffer stays registered as long as the returned
    /// [`RegisteredBuffer`] lives; it borrows both `buf` (which cannot be freed, moved or touched
    /// except through it) and the store (which cannot be closed before it is unregistered), so
    /// the library never sees memory that is no longer registered.
    pub fn register_buffer<'a>(&'a self, buf: &'a mut [u8]) -> Result<RegisteredBuffer<'a>> {
        if buf.is_empty() {
            return Err(StoreError::InvalidArgument(
                "cannot register an empty buffer".into(),
            ));
        }
        // SAFETY: buf is valid for its length for 'a, which outlives the registration (Drop
        // unregisters it).
        check(
            unsafe {
                sys::mc_store_register_buffer(
                    self.handle,
                    buf.as_mut_ptr() as u64,
                    buf.len() as u64,
                )
            }
            .into(),
        )?;
        Ok(RegisteredBuffer {
            store: self,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _mem: PhantomData,
        })
    }

    /// Closes the store: unmounts its segment and releases the handle (what `Drop` does, with
    /// the error reported).
    pub fn close(self) -> Result<()> {
        let h = self.handle;
        std::mem::forget(self);
        // SAFETY: plain value argument; the handle is not used again.
        check(unsafe { sys::mc_store_close(h) }.into())
    }
}

impl Drop for MooncakeStore {
    fn drop(&mut self) {
        // SAFETY: plain value argument; the handle is not used again.
        unsafe { sys::mc_store_close(self.handle) };
    }
}

/// Memory registered with a store for zero-copy [`put_from`](Self::put_from) and
/// [`get_into`](Self::get_into). Unregistered on drop. It mutably borrows the memory and
/// immutably borrows the store, so neither can go away while it is registered.
pub struct RegisteredBuffer<'a> {
    store: &'a MooncakeStore,
    ptr: *mut u8,
    len: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

// SAFETY: RegisteredBuffer is an exclusive borrow of plain bytes (like &mut [u8], which is Send
// and Sync) plus a &MooncakeStore (Sync); &self methods only read the bytes.
unsafe impl Send for RegisteredBuffer<'_> {}
unsafe impl Sync for RegisteredBuffer<'_> {}

impl std::fmt::Debug for RegisteredBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredBuffer")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl<'a> RegisteredBuffer<'a> {
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
        // SAFETY: ptr/len come from the &'a mut [u8] this value borrows.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn range_addr(&self, r: &Range<usize>) -> Result<(u64, u64)> {
        if r.start >= r.end || r.end > self.len {
            return Err(StoreError::InvalidArgument(format!(
                "range {}..{} is empty or outside the {}-byte buffer",
                r.start, r.end, self.len
            )));
        }
        Ok((self.ptr as u64 + r.start as u64, (r.end - r.start) as u64))
    }

    /// Stores bytes `range` of this buffer under `key`, straight from the registered memory.
    pub fn put_from(
        &self,
        key: &str,
        range: Range<usize>,
        config: Option<&ReplicateConfig>,
    ) -> Result<()> {
        one(self.batch_put_from(&[key], &[range], config))
    }

    /// `put_from` for many keys: `keys[i]` gets bytes `ranges[i]`.
    pub fn batch_put_from<K: AsRef<str>>(
        &self,
        keys: &[K],
        ranges: &[Range<usize>],
        config: Option<&ReplicateConfig>,
    ) -> Result<Vec<Result<()>>> {
        same_len("ranges", keys.len(), ranges.len())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let items = self.range_items(keys, ranges)?;
        // SAFETY: every range lies in this registered buffer, readable across the call.
        unsafe { self.store.put_items(&items, config) }
    }

    /// Reads `key` into this buffer from byte `offset` on, straight into the registered
    /// memory; returns the value's length (`OperationFailed(BUFFER_OVERFLOW)` if it does not fit).
    pub fn get_into(&mut self, key: &str, offset: usize) -> Result<usize> {
        let range = offset..self.len;
        one(self.batch_get_into(&[key], std::slice::from_ref(&range)))
    }

    /// `get_into` for many keys: `keys[i]` into bytes `ranges[i]`; per key the length or error.
    pub fn batch_get_into<K: AsRef<str>>(
        &mut self,
        keys: &[K],
        ranges: &[Range<usize>],
    ) -> Result<Vec<Result<usize>>> {
        same_len("ranges", keys.len(), ranges.len())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let items = self.range_items(keys, ranges)?;
        // SAFETY: every range lies in this buffer, exclusively borrowed (overlapping ranges only
        // mix bytes, they cannot reach memory outside it).
        unsafe { self.store.get_items(&items, None, ptr::null_mut()) }
    }

    /// Items of keys[i] with bytes ranges[i] of this buffer as their one part.
    fn range_items<K: AsRef<str>>(&self, keys: &[K], ranges: &[Range<usize>]) -> Result<CItems> {
        let parts = ranges
            .iter()
            .map(|r| self.range_addr(r).map(|p| vec![p]))
            .collect::<Result<Vec<_>>>()?;
        CItems::new(keys, &parts)
    }
}

impl Drop for RegisteredBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: plain values; the address was registered by register_buffer.
        unsafe { sys::mc_store_unregister_buffer(self.store.handle, self.ptr as u64) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(StoreError::InvalidArgument(m)) => m,
            other => panic!("want InvalidArgument, got {:?}", other),
        }
    }

    #[test]
    fn key_checks() {
        assert_eq!(invalid(ckey("")), "key is empty");
        assert_eq!(invalid(ckey("a\0b")), "key contains a NUL byte: \"a\\0b\"");
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(invalid(ckey(&long)), "key is 4097 bytes, the limit is 4096");
        assert_eq!(
            ckey(&"k".repeat(MAX_KEY_LEN)).unwrap().as_bytes().len(),
            MAX_KEY_LEN
        );
    }

    #[test]
    fn replicate_config_conversion() {
        assert!(CConfig::new(None).unwrap().is_none());
        let cfg = ReplicateConfig {
            replica_num: 2,
            with_soft_pin: true,
            with_hard_pin: false,
            preferred_segments: vec!["a:1".into(), "b:2".into()],
        };
        let c = CConfig::new(Some(&cfg)).unwrap().unwrap();
        assert_eq!(
            (c.raw.replica_num, c.raw.with_soft_pin, c.raw.with_hard_pin),
            (2, 1, 0)
        );
        // SAFETY: the pointer refers to c._segments, alive here.
        let segs = unsafe { CStr::from_ptr(c.raw.preferred_segments) };
        assert_eq!(segs.to_str().unwrap(), "a:1,b:2");
        let d = CConfig::new(Some(&ReplicateConfig::default()))
            .unwrap()
            .unwrap();
        assert_eq!(d.raw.replica_num, 1);
        assert!(d.raw.preferred_segments.is_null());
        let zero = ReplicateConfig {
            replica_num: 0,
            ..Default::default()
        };
        assert_eq!(
            invalid(CConfig::new(Some(&zero)).map(|_| ())),
            "replica_num must be at least 1"
        );
        let comma = ReplicateConfig {
            preferred_segments: vec!["a,b".into()],
            ..Default::default()
        };
        assert_eq!(
            invalid(CConfig::new(Some(&comma)).map(|_| ())),
            "preferred segment \"a,b\" is empty or contains a comma"
        );
    }

    #[test]
    fn unconnected_store() {
        let s = MooncakeStore::new().unwrap();
        assert_eq!(s.health_check(), Health::NotSetUp);
        assert_eq!(invalid(s.put("", b"x", None)), "key is empty");
        assert_eq!(invalid(s.get("")), "key is empty");
        assert_eq!(
            invalid(s.is_exist("a\0")),
            "key contains a NUL byte: \"a\\0\""
        );
        assert_eq!(
            invalid(s.get_into("k", &mut [])),
            "get_into needs a non-empty buffer"
        );
        assert_eq!(
            invalid(s.batch_put(&["a", "b"], &[b"x"], None)),
            "2 keys but 1 values"
        );
        assert_eq!(
            invalid(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", "")),
            "master_server_address is empty (want host:port of mooncake_master)"
        );
        assert!(s.batch_get::<&str>(&[]).unwrap().is_empty());
        // Not set up: the library rejects the handle's use.
        assert!(s.put("k", b"v", None).is_err());
        assert!(!last_error_message().is_empty());
        s.close().unwrap();
        assert!(!version().is_empty());
    }

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MooncakeStore>();
        assert_send_sync::<RegisteredBuffer<'static>>();
        assert_send_sync::<StoreError>();
    }
}
