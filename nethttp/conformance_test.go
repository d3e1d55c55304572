package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/nethttp"
)

// handler is the suite's handler; net/http has no error return, so every
// reply is written.
func handler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rep := adaptertest.ReplyTo(r.URL.Query().Get, body)
	if rep.Panic != nil {
		panic(rep.Panic)
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
}

func newServer(t *testing.T, l *core.Limiter, o adaptertest.Options) string {
	opts := o.GuardOptions()
	if o.DenyHandler {
		opts = append(opts, nethttp.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, v *guard.Verdict) {
			status, body := adaptertest.DenyReply(v)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
	}
	mux := http.NewServeMux()
	h := nethttp.New(l, opts...)(http.HandlerFunc(handler))
	if o.Outer != nil {
		h = nethttp.New(o.Outer.Limiter, o.Outer.Options.GuardOptions()...)(h)
	}
	mux.Handle(adaptertest.Path, h)
	srv := adaptertest.Recover(mux)
	if o.Decompress {
		srv = adaptertest.Gunzip(srv)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestConformance(t *testing.T) { adaptertest.Run(t, newServer) }
