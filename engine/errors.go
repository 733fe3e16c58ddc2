package engine

import (
	"errors"
	"fmt"
)

// Error is an engine error with Mooncake's transfer-engine error code. The exported
// sentinels below are *Error values; errors returned by the engine wrap one of them, so
// errors.Is(err, ErrAddressOverlapped) works and Code(err) gives the C ABI status.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Mooncake transfer-engine error codes.
const (
	CodeInvalidArgument      = -1
	CodeTooManyRequests      = -2
	CodeAddressNotRegistered = -3
	CodeBatchBusy            = -4
	CodeDeviceNotFound       = -6
	CodeAddressOverlapped    = -7
	CodeDNSFail              = -100
	CodeSocket               = -101
	CodeMalformedJSON        = -102
	CodeRejectHandshake      = -103
	CodeMetadata             = -200
	CodeEndpoint             = -201
	CodeMemory               = -302
	CodeNotImplemented       = -400
)

var (
	ErrInvalidArgument      = &Error{CodeInvalidArgument, "invalid argument"}
	ErrTooManyRequests      = &Error{CodeTooManyRequests, "too many requests for the batch's capacity"}
	ErrAddressNotRegistered = &Error{CodeAddressNotRegistered, "address not registered"}
	ErrBatchBusy            = &Error{CodeBatchBusy, "batch still has unfinished transfers"}
	ErrAddressOverlapped    = &Error{CodeAddressOverlapped, "address range overlaps a registered buffer"}
	ErrSocket               = &Error{CodeSocket, "socket error"}
	ErrMalformedJSON        = &Error{CodeMalformedJSON, "malformed JSON"}
	ErrMetadata             = &Error{CodeMetadata, "metadata error"}
	ErrMemory               = &Error{CodeMemory, "memory error"}
	// ErrNotSupported: the protocol or device does not exist on this host (rdma, nvlink, cxl, ...).
	ErrNotSupported = &Error{CodeNotImplemented, "not supported on this host"}
	// ErrUnknownSegment: no open segment has this id / no peer answers to this name.
	ErrUnknownSegment = &Error{CodeInvalidArgument, "unknown segment"}
	// ErrUnknownBatch: the batch id was never allocated or was freed.
	ErrUnknownBatch = &Error{CodeInvalidArgument, "unknown batch"}
	// ErrClosed: the engine was closed.
	ErrClosed = &Error{CodeInvalidArgument, "engine is closed"}
)

// Code returns the Mooncake error code of err (0 for nil, -1 when err carries none).
func Code(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInvalidArgument
}

func errf(sentinel *Error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
