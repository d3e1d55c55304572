package nethttp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/outboundtest"
	"github.com/ratekit/ratekit/nethttp"
)

// outboundServer is the outbound suite's server over HTTP: a provider,
// and when requests left the Transports in front of it.
type outboundServer struct {
	*provider
	outboundtest.Departures
}

func (s *outboundServer) Arrived() int { return int(s.hits.Load()) }

// RoundTrip is the base of the Transports: it records when a request
// leaves, past its limits, and sends it to the provider.
func (s *outboundServer) RoundTrip(r *http.Request) (*http.Response, error) {
	s.Leave()
	return s.provider.Client().Transport.RoundTrip(r)
}

// Client returns a Send that POSTs "{}" to the provider through a
// Transport of l, with header as its header fields.
func (s *outboundServer) Client(t *testing.T, l *core.Limiter, opts ...guard.Option) outboundtest.Send {
	c := &http.Client{Transport: nethttp.Transport(l, s, opts...)}
	return func(ctx context.Context, header map[string]string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader("{}"))
		if err != nil {
			return err
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		status, err := do(c, req)
		if err == nil && status != http.StatusAccepted {
			err = fmt.Errorf("status %d, want %d", status, http.StatusAccepted)
		}
		return err
	}
}

// transportRefused checks the form of a request the Transport refused:
// http.Client's error around the Transport's own, which says "ratekit:"
// once, as the start of its own part.
func transportRefused(err error, _ outboundtest.Refusal) string {
	if !strings.Contains(err.Error(), "nethttp: Transport: ") {
		return "the error does not name nethttp.Transport"
	}
	if n := strings.Count(err.Error(), "ratekit: "); n != 1 {
		return fmt.Sprintf("the error %q says ratekit %d times, want once", err, n)
	}
	return ""
}

func TestOutbound(t *testing.T) {
	outboundtest.Run(t, outboundtest.Harness{
		Constructor: "Transport",
		Start:       func(t *testing.T) outboundtest.Server { return &outboundServer{provider: newProvider(t)} },
		Refused:     transportRefused,
	})
}
