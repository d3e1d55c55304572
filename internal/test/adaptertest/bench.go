package adaptertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// Writer is the http.ResponseWriter of the middleware benchmarks: it
// keeps the status and header but no body, so that a benchmark measures
// the handler and the middleware rather than a recorder. [Writer.Reset]
// gives it a fresh header map, as net/http gives every response.
type Writer struct {
	header http.Header
	// Code is the status written; 0 until WriteHeader or Write.
	Code int
}

// Reset prepares w for the next request.
func (w *Writer) Reset() {
	w.header = make(http.Header)
	w.Code = 0
}

// Header implements http.ResponseWriter.
func (w *Writer) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter.
func (w *Writer) WriteHeader(code int) {
	if w.Code == 0 {
		w.Code = code
	}
}

// Write implements http.ResponseWriter, discarding p.
func (w *Writer) Write(p []byte) (int, error) {
	if w.Code == 0 {
		w.Code = http.StatusOK
	}
	return len(p), nil
}

// BenchHandler is the bare handler of the middleware benchmarks: a JSON
// API's smallest answer (a content type and a short body).
func BenchHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// BenchLimiter returns the limiter of the middleware benchmarks: a memory
// store and a limit that one key never reaches at benchmark rates, so that
// every request takes the allowed path.
func BenchLimiter(b testing.TB) *core.Limiter {
	b.Helper()
	return testkit.Limiter(b, core.NewMemoryStore(), core.Policy{
		Name:  "bench",
		Rules: []core.Rule{{Limit: 100_000, Window: time.Millisecond}},
	})
}

// ServeBench serves req through h b.N times on a [Writer] and fails b on a
// status other than 200.
func ServeBench(b *testing.B, h http.Handler, req *http.Request) {
	b.Helper()
	var w Writer
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		h.ServeHTTP(&w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d, want 200", w.Code)
		}
	}
}
