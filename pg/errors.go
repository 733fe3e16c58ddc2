package pg

import (
	"errors"

	"github.com/mooncake-go/mooncake/collective"
)

// Status codes of process-group errors (Mooncake's error table where one fits). An error this
// package returns carries its code: errors.As(err, &c) with c an interface{ Code() int }.
const (
	CodeInvalidParams = -600 // INVALID_PARAMS: bad arguments, or ranks that disagree on an op
	CodeTransferFail  = -800 // TRANSFER_FAIL: a peer failed, timed out or aborted the op
)

// coded is an error with a status code.
type coded interface{ Code() int }

// paramErr is an invalid-argument error.
type paramErr struct{ msg string }

func (e paramErr) Error() string { return e.msg }
func (e paramErr) Code() int     { return CodeInvalidParams }

func invalid(msg string) error { return paramErr{msg} }

// opErr gives a failed op its status code.
type opErr struct{ err error }

func (e opErr) Error() string { return e.err.Error() }
func (e opErr) Unwrap() error { return e.err }
func (e opErr) Code() int {
	var me *collective.MismatchError
	if errors.As(e.err, &me) {
		return CodeInvalidParams
	}
	return CodeTransferFail
}

// Coded returns err with a status code: its own when it has one, else CodeInvalidParams for
// a mismatch among ranks and CodeTransferFail for anything else. nil stays nil.
func Coded(err error) error {
	if err == nil {
		return nil
	}
	var c coded
	if errors.As(err, &c) {
		return err
	}
	return opErr{err}
}
