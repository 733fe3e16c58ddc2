package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorCode is a Mooncake Store status code; 0 is OK, errors are negative. The numbers match
// upstream Mooncake so that code written against its documentation keeps working.
type ErrorCode int32

// The Mooncake Store error table.
const (
	OK                            ErrorCode = 0
	INTERNAL_ERROR                ErrorCode = -1
	BUFFER_OVERFLOW               ErrorCode = -10
	SEGMENT_NOT_FOUND             ErrorCode = -101
	SEGMENT_ALREADY_EXISTS        ErrorCode = -102
	CLIENT_NOT_FOUND              ErrorCode = -103
	NO_AVAILABLE_HANDLE           ErrorCode = -200
	INVALID_VERSION               ErrorCode = -300
	INVALID_KEY                   ErrorCode = -400
	WRITE_FAIL                    ErrorCode = -500
	INVALID_PARAMS                ErrorCode = -600
	ILLEGAL_CLIENT                ErrorCode = -601
	INVALID_WRITE                 ErrorCode = -700
	INVALID_READ                  ErrorCode = -701
	INVALID_REPLICA               ErrorCode = -702
	REPLICA_IS_NOT_READY          ErrorCode = -703
	OBJECT_NOT_FOUND              ErrorCode = -704
	OBJECT_ALREADY_EXISTS         ErrorCode = -705
	OBJECT_HAS_LEASE              ErrorCode = -706
	LEASE_EXPIRED                 ErrorCode = -707
	REPLICA_NOT_FOUND             ErrorCode = -710
	OBJECT_REPLICA_BUSY           ErrorCode = -714
	TRANSFER_FAIL                 ErrorCode = -800
	CHECKSUM_MISMATCH             ErrorCode = -801
	RPC_FAIL                      ErrorCode = -900
	RPC_TIMEOUT                   ErrorCode = -901
	ETCD_OPERATION_ERROR          ErrorCode = -1000
	ETCD_KEY_NOT_EXIST            ErrorCode = -1001
	ETCD_TRANSACTION_FAIL         ErrorCode = -1002
	OPLOG_ENTRY_NOT_FOUND         ErrorCode = -1004
	INCOMPLETE_OPLOG_CATCH_UP     ErrorCode = -1007
	UNAVAILABLE_IN_CURRENT_STATUS ErrorCode = -1010
	FILE_NOT_FOUND                ErrorCode = -1100
	FILE_OPEN_FAIL                ErrorCode = -1101
	FILE_READ_FAIL                ErrorCode = -1102
	FILE_WRITE_FAIL               ErrorCode = -1103
)

var codeNames = map[ErrorCode]string{
	OK: "OK", INTERNAL_ERROR: "INTERNAL_ERROR", BUFFER_OVERFLOW: "BUFFER_OVERFLOW",
	SEGMENT_NOT_FOUND: "SEGMENT_NOT_FOUND", SEGMENT_ALREADY_EXISTS: "SEGMENT_ALREADY_EXISTS",
	CLIENT_NOT_FOUND: "CLIENT_NOT_FOUND", NO_AVAILABLE_HANDLE: "NO_AVAILABLE_HANDLE",
	INVALID_VERSION: "INVALID_VERSION", INVALID_KEY: "INVALID_KEY", WRITE_FAIL: "WRITE_FAIL",
	INVALID_PARAMS: "INVALID_PARAMS", ILLEGAL_CLIENT: "ILLEGAL_CLIENT", INVALID_WRITE: "INVALID_WRITE",
	INVALID_READ: "INVALID_READ", INVALID_REPLICA: "INVALID_REPLICA",
	REPLICA_IS_NOT_READY: "REPLICA_IS_NOT_READY", OBJECT_NOT_FOUND: "OBJECT_NOT_FOUND",
	OBJECT_ALREADY_EXISTS: "OBJECT_ALREADY_EXISTS", OBJECT_HAS_LEASE: "OBJECT_HAS_LEASE",
	LEASE_EXPIRED: "LEASE_EXPIRED", REPLICA_NOT_FOUND: "REPLICA_NOT_FOUND",
	OBJECT_REPLICA_BUSY: "OBJECT_REPLICA_BUSY", TRANSFER_FAIL: "TRANSFER_FAIL",
	CHECKSUM_MISMATCH: "CHECKSUM_MISMATCH", RPC_FAIL: "RPC_FAIL", RPC_TIMEOUT: "RPC_TIMEOUT",
	ETCD_OPERATION_ERROR: "ETCD_OPERATION_ERROR", ETCD_KEY_NOT_EXIST: "ETCD_KEY_NOT_EXIST",
	ETCD_TRANSACTION_FAIL: "ETCD_TRANSACTION_FAIL", OPLOG_ENTRY_NOT_FOUND: "OPLOG_ENTRY_NOT_FOUND",
	INCOMPLETE_OPLOG_CATCH_UP:     "INCOMPLETE_OPLOG_CATCH_UP",
	UNAVAILABLE_IN_CURRENT_STATUS: "UNAVAILABLE_IN_CURRENT_STATUS",
	FILE_NOT_FOUND:                "FILE_NOT_FOUND", FILE_OPEN_FAIL: "FILE_OPEN_FAIL",
	FILE_READ_FAIL: "FILE_READ_FAIL", FILE_WRITE_FAIL: "FILE_WRITE_FAIL",
}

// String returns the upstream name of the code ("OBJECT_NOT_FOUND"), or "ERROR(<n>)".
func (c ErrorCode) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("ERROR(%d)", int32(c))
}

// Err returns nil for OK and an *Error carrying c otherwise.
func (c ErrorCode) Err(msg string) error {
	if c == OK {
		return nil
	}
	return &Error{Code: c, Msg: msg}
}

// Error is a Mooncake Store failure with its code. errors.Is(err, api.OBJECT_NOT_FOUND) style
// checks work through [Is] / [CodeOf]; errors.Is(err, &api.Error{Code: X}) also matches by code.
type Error struct {
	Code ErrorCode
	Msg  string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("mooncake store: %s (%d)", e.Code, int32(e.Code))
	}
	return fmt.Sprintf("mooncake store: %s (%s, %d)", e.Msg, e.Code, int32(e.Code))
}

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf builds an *Error with a formatted message.
func Errorf(code ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf extracts the Mooncake code from err: nil -> OK, *Error -> its code, deadline/timeouts ->
// RPC_TIMEOUT, other gRPC transport failures -> RPC_FAIL, anything else -> INTERNAL_ERROR.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return RPC_TIMEOUT
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.DeadlineExceeded:
			return RPC_TIMEOUT
		case codes.OK:
			return OK
		default:
			return RPC_FAIL
		}
	}
	return INTERNAL_ERROR
}

// Is reports whether err carries code.
func Is(err error, code ErrorCode) bool { return CodeOf(err) == code }
