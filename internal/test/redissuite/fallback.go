package redissuite

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// fleetOf builds n app instances, each a limiter of p on a store of its
// own client of srv (which never retries), and waits until the store
// counts all n, when counted is set: the limiters count the instances
// unless they keep the whole limit (core.WithLocalShare(false)).
func fleetOf(t *testing.T, drv Driver, srv *redistest.Server, n int, counted bool, p core.Policy, opts ...core.Option) []*core.Limiter {
	t.Helper()
	ls := make([]*core.Limiter, n)
	stores := make([]Store, n)
	for i := range ls {
		stores[i] = drv.Open(t, on(srv, Conf{NoRetry: true}))
		ls[i] = testkit.Limiter(t, stores[i], p, append([]core.Option{core.WithBreaker(0, 0)}, opts...)...)
		warmLimiter(t, ls[i])
	}
	if counted {
		waitInstances(t, n, p.Name, stores...)
	}
	return ls
}

// admitN makes n decisions of l on key and returns how many were
// admitted, failing t on a decision not made by src.
func admitN(t *testing.T, l *core.Limiter, key string, n int, src core.Source) int {
	t.Helper()
	got := 0
	for range n {
		d, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatalf("Allow(%s): %v", key, err)
		}
		if d.Source != src {
			t.Fatalf("Allow(%s) = %+v, want Source %v", key, d, src)
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

// testFailLocalShare: three instances share a Redis that then stops.
// Under FailLocal each instance admits its share of the limit,
// ⌊6/3⌋ = 2, from a window that starts with its own admissions through
// Redis: a fresh key gets 6 in all, the limit, and a key with 2
// admissions on one instance before the outage gets 4 more, so 6 in the
// window. With WithLocalShare(false) each instance admits the whole
// limit.
func testFailLocalShare(t *testing.T, drv Driver) {
	const limit = 6
	for _, tc := range []struct {
		name        string
		counted     bool // the limiters count the instances
		opts        []core.Option
		fresh, used int // admitted in the outage: a fresh key, the used one
	}{
		{"share", true, nil, 3 * 2, 0 + 2 + 2},
		{"whole", false, []core.Option{core.WithLocalShare(false)}, 3 * limit, (limit - 2) + limit + limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := core.Policy{Name: "share", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
			ls := fleetOf(t, drv, srv, 3, tc.counted, p, tc.opts...)
			if got := admitN(t, ls[0], "used", 2, core.SourceStore); got != 2 {
				t.Fatalf("instance 0 admitted %d of 2 on key used before the outage", got)
			}
			srv.Stop()
			fresh, used := 0, 0
			for _, l := range ls {
				fresh += admitN(t, l, "fresh", 2*limit, core.SourceLocal)
				used += admitN(t, l, "used", 2*limit, core.SourceLocal)
			}
			if fresh != tc.fresh || used != tc.used {
				t.Errorf("admitted during the outage: %d on a fresh key, %d on the used one; want %d and %d",
					fresh, used, tc.fresh, tc.used)
			}
		})
	}
}

// testFailLocalRemembers: what an instance learned from Redis holds when
// Redis fails: a lockout Redis reported stays in force on that instance,
// and units it refunded through Redis are free in its local window too.
func testFailLocalRemembers(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	p := core.Policy{Name: "remember", Rules: []core.Rule{{Limit: 3, Window: time.Minute}},
		Lockout: core.Lockout{For: time.Hour}}
	// Without a deny cache, which would answer the lockout's denial too.
	l := fleetOf(t, drv, srv, 1, true, p, core.WithDenyCache(0))[0]
	ctx := context.Background()
	// Locked out by Redis: three admitted, the fourth denied.
	admitN(t, l, "mallory", 4, core.SourceStore)
	// Three admitted, two of them refunded (count only failures).
	var ds []core.Decision
	for range 3 {
		d, err := l.Allow(ctx, "alice")
		if err != nil || !d.Allowed {
			t.Fatalf("Allow(alice) = %+v, %v", d, err)
		}
		ds = append(ds, d)
	}
	for _, d := range ds[:2] {
		if err := d.Refund(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	d, err := l.Allow(ctx, "mallory")
	if err != nil || d.Allowed || !d.Locked || d.Source != core.SourceLocal || d.RetryAfter < 59*time.Minute {
		t.Errorf("Allow(mallory) during the outage = %+v, %v; want denied locally, Locked, RetryAfter about 1h", d, err)
	}
	if got := admitN(t, l, "alice", 5, core.SourceLocal); got != 2 {
		t.Errorf("Allow(alice) during the outage admitted %d, want 2 (3 minus the one kept)", got)
	}
}

// testFallbackNotices: a limiter that starts deciding by its failure
// policy says so once, and once again when Redis is back with the number
// of decisions made meanwhile: to its observers, or, without any, through
// log/slog's default logger. Never one line per request.
func testFallbackNotices(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	p := core.Policy{Name: "notice", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}}
	obs := &testkit.Events{}
	watched := fleetOf(t, drv, srv, 1, true, p, core.WithObserver(obs))[0]
	logs := &logRecorder{}
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(logs))
	silent := fleetOf(t, drv, srv, 1, true, core.Policy{Name: "silent", Rules: p.Rules})[0]

	srv.Stop()
	const outage = 20
	for _, l := range []*core.Limiter{watched, silent} {
		admitN(t, l, "k", outage, core.SourceLocal)
	}
	srv.Restart()
	// Decisions come from Redis again; a second after the last
	// fallback the episode ends.
	for _, l := range []*core.Limiter{watched, silent} {
		waitStore(t, l)
	}
	time.Sleep(1100 * time.Millisecond)
	for _, l := range []*core.Limiter{watched, silent} {
		admitN(t, l, "k", 3, core.SourceStore)
	}

	starts, ends := obs.Of(core.EventFallbackStart), obs.Of(core.EventFallbackEnd)
	if len(starts) != 1 || starts[0].Err == nil || len(ends) != 1 || ends[0].Fallbacks < outage {
		t.Errorf("observer saw %d EventFallbackStart (%+v) and %d EventFallbackEnd (%+v); want one each, the end counting at least %d",
			len(starts), starts, len(ends), ends, outage)
	}
	// The default logger is the process's: the limiters of tests before
	// this one may still log there (their background flushes). This
	// test's policies are notice and silent.
	var recs []logRecord
	for _, r := range logs.all() {
		if p := attr(r, "policy"); p == "notice" || p == "silent" {
			recs = append(recs, r)
		}
	}
	if len(recs) != 2 || recs[0].Level != slog.LevelWarn || recs[1].Level != slog.LevelInfo {
		t.Fatalf("default logger got %d records (%v), want a warning and an info", len(recs), recs)
	}
	if got := attr(recs[0], "policy"); got != "silent" {
		t.Errorf("warning names policy %q, want silent", got)
	}
	if got := attr(recs[0], "failure_policy"); got != "FailLocal" {
		t.Errorf("warning names failure policy %q, want FailLocal", got)
	}
	if n, _ := recs[1].attrs["fallback_decisions"].(int64); n < outage {
		t.Errorf("info counts %d fallback decisions, want at least %d", n, outage)
	}
}

// testFallbackEndWithoutTraffic: the end of an outage is noticed when
// Redis answers again, not at the next decision that reaches it: with no
// request at all after Redis restarts, the episode's end is reported
// within a few seconds (the breaker's cool-down and a probe a second),
// and what the failure policy admitted is counted in Redis by then.
func testFallbackEndWithoutTraffic(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	obs := &testkit.Events{}
	l := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "quiet", Rules: []core.Rule{{Limit: 10, Window: time.Hour}}},
		core.WithObserver(obs), core.WithTimeout(time.Second))
	admitN(t, l, "k", 3, core.SourceStore)
	srv.Stop()
	admitN(t, l, "k", 4, core.SourceLocal)
	srv.Restart()
	restarted := time.Now()
	testkit.WaitUntil(t, "the end of the outage reported", func() bool { return len(obs.Of(core.EventFallbackEnd)) == 1 })
	t.Logf("the end of the outage reported %v after Redis restarted, with no request", time.Since(restarted).Round(time.Millisecond))
	if took := time.Since(restarted); took > 5*time.Second {
		t.Errorf("the end of the outage reported %v after Redis restarted, want within 5 s", took)
	}
	// The restart emptied Redis: what it holds is what the fallback
	// admitted, told by the probe's answer.
	testkit.WaitUntil(t, "the fallback's admissions counted in Redis", func() bool {
		d, err := l.Peek(context.Background(), "k")
		return err == nil && d.Source == core.SourceStore && d.Rules()[0].Used == 4
	})
}

// waitStore waits until l decides by the store again.
func waitStore(t *testing.T, l *core.Limiter) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := l.Allow(context.Background(), "probe")
		if err == nil && d.Source == core.SourceStore {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %q: still %+v, %v after Redis came back", l.Policy().Name, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	Level slog.Level
	Msg   string
	attrs map[string]any
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

func (h *logRecorder) all() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), h.recs...)
}

func attr(r logRecord, key string) string { return fmt.Sprint(r.attrs[key]) }
