package keyfunc

import (
	"errors"
	"fmt"
)

// reasoned is a key error with a fixed reason that may be shown to the
// client.
type reasoned struct {
	err    error
	reason string
}

func (e *reasoned) Error() string  { return e.err.Error() }
func (e *reasoned) Unwrap() error  { return e.err }
func (e *reasoned) Reason() string { return e.reason }

// withReason attaches a client-safe reason to err.
func withReason(err error, reason string) error { return &reasoned{err: err, reason: reason} }

// Reason returns a short, fixed reason for a key error that may be shown to
// the client, such as "invalid phone number" or "request body too large":
// the Reason() string of the first error in err's chain (as [errors.As]
// walks it) that has a Reason() string method, and "" when none has. Key
// functions in any package give their errors such a method; the reason
// must never contain request input. Adapters put it in the 400 (or
// 413) answer.
func Reason(err error) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return r.Reason()
	}
	return ""
}

// BodyTooLarge returns the error a [Request.Body] implementation returns for
// a body longer than limit: it wraps [ErrBodyTooLarge] (and so
// [ErrInvalidKey]) and carries the reason "request body too large".
func BodyTooLarge(limit int64) error {
	return withReason(fmt.Errorf("ratekit: keyfunc: body longer than %d bytes: %w", limit, ErrBodyTooLarge), "request body too large")
}
