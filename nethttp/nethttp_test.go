package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	nethttp.New(nil)
}

// TestResponseController checks the net/http trap: with WithCountIf the
// status-capturing writer still lets http.ResponseController flush and
// set deadlines, and the flushed status is the one counted.
func TestResponseController(t *testing.T) {
	var flushErr, deadlineErr error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		rc := http.NewResponseController(w)
		flushErr = rc.Flush()
		deadlineErr = rc.SetWriteDeadline(time.Now().Add(time.Minute))
	})
	mw := nethttp.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithCountIf(func(s int) bool { return s == http.StatusUnauthorized }))
	srv := httptest.NewServer(mw(h))
	defer srv.Close()

	var got []int
	for range 2 {
		res, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got = append(got, res.StatusCode)
	}
	if flushErr != nil || deadlineErr != nil {
		t.Errorf("ResponseController: Flush %v, SetWriteDeadline %v; want both supported", flushErr, deadlineErr)
	}
	if got[0] != 401 || got[1] != 429 {
		t.Errorf("statuses %v, want [401 429]: the flushed 401 counts", got)
	}
}

// TestRouteIsPattern checks that key functions see the ServeMux pattern.
func TestRouteIsPattern(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", nethttp.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithKey(keyfunc.Route()))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	var got []int
	for _, p := range []string{"/users/1", "/users/2"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		got = append(got, rec.Code)
	}
	if got[0] != 200 || got[1] != 429 {
		t.Errorf("statuses %v, want [200 429]: one bucket for the pattern", got)
	}
}
