package nethttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
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
	if o.ChallengeHandler {
		opts = append(opts, nethttp.WithChallengeHandler(func(w http.ResponseWriter, _ *http.Request, v *guard.Verdict) {
			status, body := adaptertest.ChallengeReply(v)
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

func TestOneLiners(t *testing.T) {
	adaptertest.RunOneLiners(t, adaptertest.OneLiners[func(http.Handler) http.Handler]{
		LimitByIP:     nethttp.LimitByIP,
		LimitByAppKey: nethttp.LimitByAppKey,
		LimitByUser:   nethttp.LimitByUser,
		UseStore:      nethttp.UseStore,
	}, func(t *testing.T, limit func(http.Handler) http.Handler) adaptertest.Call {
		auth := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if u := r.Header.Get(adaptertest.UserHeader); u != "" {
					r = r.WithContext(context.WithValue(r.Context(), adaptertest.UserKey, u)) //nolint:staticcheck // the suite's one key for every adapter: echo's c.Set takes strings only
				}
				next.ServeHTTP(w, r)
			})
		}
		mux := http.NewServeMux()
		mux.Handle(adaptertest.Path, auth(limit(http.HandlerFunc(handler))))
		ts := httptest.NewServer(mux)
		t.Cleanup(ts.Close)
		return adaptertest.HTTPCall(t, ts.URL)
	})
}
