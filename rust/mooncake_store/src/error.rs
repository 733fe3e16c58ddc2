//! The error type of the store API and the store's error codes.
use std::fmt;

/// The Mooncake Store error codes the C ABI returns (Mooncake's error table; `store/api/errors.go`
/// in this repository). A failed operation carries one in [`StoreError::OperationFailed`].
pub mod codes {
    pub const INTERNAL_ERROR: i32 = -1;
    pub const BUFFER_OVERFLOW: i32 = -10;
    pub const SEGMENT_NOT_FOUND: i32 = -101;
    pub const NO_AVAILABLE_HANDLE: i32 = -200;
    pub const INVALID_KEY: i32 = -400;
    pub const WRITE_FAIL: i32 = -500;
    pub const INVALID_PARAMS: i32 = -600;
    pub const INVALID_WRITE: i32 = -700;
    pub const INVALID_READ: i32 = -701;
    pub const REPLICA_IS_NOT_READY: i32 = -703;
    pub const OBJECT_NOT_FOUND: i32 = -704;
    pub const OBJECT_ALREADY_EXISTS: i32 = -705;
    pub const OBJECT_HAS_LEASE: i32 = -706;
    pub const TRANSFER_FAIL: i32 = -800;
    pub const CHECKSUM_MISMATCH: i32 = -801;
    pub const RPC_FAIL: i32 = -900;
    pub const RPC_TIMEOUT: i32 = -901;
}

/// Every fallible store operation returns `Result<T, StoreError>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The library returned a non-zero status: one of [`codes`] (a missing key is
    /// `OperationFailed(codes::OBJECT_NOT_FOUND)`, -704).
    OperationFailed(i32),
    /// `setup` failed (master unreachable, engine could not start, already set up, ...); the
    /// message is the library's, with its status code.
    SetupError(String),
    /// An argument was rejected before or by the library: an empty key, a key over 4096 bytes,
    /// a NUL byte inside a string, a zero-length buffer, a length mismatch between batch inputs
    /// (the library's INVALID_PARAMS, -600, also maps here).
    InvalidArgument(String),
}

impl StoreError {
    /// The store status code, for `OperationFailed` (and `INVALID_PARAMS` for
    /// `InvalidArgument`); `None` for `SetupError`.
    pub fn code(&self) -> Option<i32> {
        match self {
            StoreError::OperationFailed(c) => Some(*c),
            StoreError::InvalidArgument(_) => Some(codes::INVALID_PARAMS),
            StoreError::SetupError(_) => None,
        }
    }

    /// True for `OperationFailed(OBJECT_NOT_FOUND)`.
    pub fn is_not_found(&self) -> bool {
        *self == StoreError::OperationFailed(codes::OBJECT_NOT_FOUND)
    }
}

/// The name of a store error code (`"OBJECT_NOT_FOUND"`), or `"UNKNOWN"`.
pub fn code_name(code: i32) -> &'static str {
    use codes::*;
    match code {
        INTERNAL_ERROR => "INTERNAL_ERROR",
        BUFFER_OVERFLOW => "BUFFER_OVERFLOW",
        SEGMENT_NOT_FOUND => "SEGMENT_NOT_FOUND",
        NO_AVAILABLE_HANDLE => "NO_AVAILABLE_HANDLE",
        INVALID_KEY => "INVALID_KEY",
        WRITE_FAIL => "WRITE_FAIL",
        INVALID_PARAMS => "INVALID_PARAMS",
        INVALID_WRITE => "INVALID_WRITE",
        INVALID_READ => "INVALID_READ",
        REPLICA_IS_NOT_READY => "REPLICA_IS_NOT_READY",
        OBJECT_NOT_FOUND => "OBJECT_NOT_FOUND",
        OBJECT_ALREADY_EXISTS => "OBJECT_ALREADY_EXISTS",
        OBJECT_HAS_LEASE => "OBJECT_HAS_LEASE",
        TRANSFER_FAIL => "TRANSFER_FAIL",
        CHECKSUM_MISMATCH => "CHECKSUM_MISMATCH",
        RPC_FAIL => "RPC_FAIL",
        RPC_TIMEOUT => "RPC_TIMEOUT",
        _ => "UNKNOWN",
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::OperationFailed(c) => {
                write!(f, "store operation failed: {} ({})", code_name(*c), c)
            }
            StoreError::SetupError(m) => write!(f, "store setup failed: {}", m),
            StoreError::InvalidArgument(m) => write!(f, "invalid argument: {}", m),
        }
    }
}

impl std::error::Error for StoreError {}

/// `Result<T, StoreError>`.
pub type Result<T> = std::result::Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_codes() {
        let e = StoreError::OperationFailed(codes::OBJECT_NOT_FOUND);
        assert_eq!(
            e.to_string(),
            "store operation failed: OBJECT_NOT_FOUND (-704)"
        );
        assert!(e.is_not_found());
        assert_eq!(e.code(), Some(-704));
        let e = StoreError::InvalidArgument("key is empty".into());
        assert_eq!(e.to_string(), "invalid argument: key is empty");
        assert_eq!(e.code(), Some(-600));
        assert!(!e.is_not_found());
        let e = StoreError::SetupError("no master".into());
        assert_eq!(e.to_string(), "store setup failed: no master");
        assert_eq!(e.code(), None);
        assert_eq!(code_name(-12345), "UNKNOWN");
        let boxed: Box<dyn std::error::Error> = Box::new(StoreError::OperationFailed(-900));
        assert_eq!(boxed.to_string(), "store operation failed: RPC_FAIL (-900)");
    }
}
