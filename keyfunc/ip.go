package keyfunc

// IPOption configures [ClientIP].
type IPOption func(*ipConfig)

type ipConfig struct{}

// ClientIP keys requests by client IP. PLACEHOLDER: being implemented.
func ClientIP(opts ...IPOption) Func {
	return func(r Request) (string, error) { return r.RemoteAddr(), nil }
}
