package personal

// reasonError is a key error with a fixed reason that may be shown to the
// client; [keyfunc.Reason] finds it through its Reason method.
type reasonError struct {
	err    error
	reason string
}

func (e *reasonError) Error() string  { return e.err.Error() }
func (e *reasonError) Unwrap() error  { return e.err }
func (e *reasonError) Reason() string { return e.reason }

// withReason attaches a client-safe reason to err.
func withReason(err error, reason string) error { return &reasonError{err: err, reason: reason} }
