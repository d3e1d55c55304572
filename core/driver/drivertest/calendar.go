package drivertest

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the suite's time zones, wherever it runs

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// Zone loads the time zone name or fails t.
func Zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// ZoneWithMidnightAt returns a fixed zone whose midnight falls at the
// whole second at, so that a test can put a calendar day's end where it
// needs it.
func ZoneWithMidnightAt(at time.Time) *time.Location {
	off := (86400 - int(at.Unix()%86400)) % 86400
	if off > 43200 {
		off -= 86400
	}
	return time.FixedZone(fmt.Sprintf("midnight-at-%d", at.Unix()), off)
}

// testCalendarPeriods walks calendar rules across their boundaries on a
// stepped clock, next to a sliding rule: exact usage, RetryAfter and
// ResetAfter to the period's end, the period's length (a leap February,
// days of 23 and 25 hours, a day whose midnight is skipped, an ISO week),
// and a fresh count from the first microsecond of the next period.
func testCalendarPeriods(t *testing.T, s *suite) {
	paris := Zone(t, "Europe/Paris")
	havana := Zone(t, "America/Havana")
	const day = 24 * time.Hour
	for _, tc := range []calendarPeriod{
		{"month of a leap February", core.Month, paris,
			time.Date(2024, 2, 10, 9, 30, 0, 0, paris), time.Date(2024, 3, 1, 0, 0, 0, 0, paris), 29 * day, 31*day - time.Hour},
		{"day of 23 hours", core.Day, paris,
			time.Date(2025, 3, 30, 1, 30, 0, 0, paris), time.Date(2025, 3, 31, 0, 0, 0, 0, paris), 23 * time.Hour, day},
		{"day of 25 hours", core.Day, paris,
			time.Date(2025, 10, 26, 12, 0, 0, 0, paris), time.Date(2025, 10, 27, 0, 0, 0, 0, paris), 25 * time.Hour, day},
		{"day before a skipped midnight", core.Day, havana,
			time.Date(2024, 3, 9, 12, 0, 0, 0, havana), time.Date(2024, 3, 10, 5, 0, 0, 0, time.UTC), day, 23 * time.Hour},
		{"ISO week to Monday", core.Week, paris,
			time.Date(2024, 3, 3, 23, 0, 0, 0, paris), time.Date(2024, 3, 4, 0, 0, 0, 0, paris), 7 * day, 7 * day},
		{"month in UTC (nil Location)", core.Month, nil,
			time.Date(2023, 12, 31, 23, 50, 0, 0, time.UTC), time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), 31 * day, 31 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			algorithms(t, func(t *testing.T, algo core.Algorithm) {
				clk := NewClock(tc.start)
				l, _ := s.policyLimiter(t, core.Policy{
					Rules:     []core.Rule{{Limit: 3, Window: time.Minute}, {Limit: 5, Calendar: tc.cal, Location: tc.loc}},
					Algorithm: algo,
				}, core.WithClock(clk.Now))
				tc.fill(t, l, clk)
				tc.full(t, l, clk)
				tc.nextPeriod(t, l, clk)
			})
		})
	}
}

// calendarPeriod is a case of testCalendarPeriods: a limiter of 3 a minute
// and 5 per period of cal in loc, on a clock that starts in the period.
type calendarPeriod struct {
	name       string
	cal        core.Calendar
	loc        *time.Location
	start, end time.Time     // a time in a period, and its end
	length     time.Duration // the period's length
	next       time.Duration // the next period's length
}

// checkRule checks the calendar rule's state in d: used units of a period
// of length, which resets at the period's end.
func (tc *calendarPeriod) checkRule(t *testing.T, clk *Clock, what string, d core.Decision, used int64, length time.Duration) {
	t.Helper()
	r := d.Rules()[1]
	left := tc.end.Sub(clk.Now())
	if r.Calendar != tc.cal || r.Used != used || r.Window != length || r.ResetAfter != left || r.Limit != 5 {
		t.Errorf("%s: Rules[1] = %+v, want Calendar %v, Used %d, Window %v, ResetAfter %v", what, r, tc.cal, used, length, left)
	}
}

// fill takes the period's 5 units: 2 that the minute rule binds, then 3
// past the minute that the calendar rule binds.
func (tc *calendarPeriod) fill(t *testing.T, l *core.Limiter, clk *Clock) {
	t.Helper()
	d := allowN(t, l, "k", 2)
	if !d.Allowed || d.Rule != 0 || d.Remaining != 1 {
		t.Fatalf("AllowN(k, 2) = %s, want allowed, the minute rule binding with 1 left", show(d))
	}
	tc.checkRule(t, clk, "AllowN(k, 2)", d, 2, tc.length)

	// Past the minute rule's window and its buckets.
	clk.Add(2 * time.Minute)
	d = allowN(t, l, "k", 3)
	left := tc.end.Sub(clk.Now())
	if !d.Allowed || d.Rule != 1 || d.Remaining != 0 || d.ResetAfter != left || d.Window != tc.length || d.Limit != 5 {
		t.Fatalf("AllowN(k, 3) = %s Window %v, want allowed, the %v rule binding: Remaining 0, ResetAfter %v, Window %v",
			show(d), d.Window, tc.cal, left, tc.length)
	}
	tc.checkRule(t, clk, "AllowN(k, 3)", d, 5, tc.length)
}

// full checks that the full period denies, by the calendar rule, until
// its last microsecond, and that a Peek says so too.
func (tc *calendarPeriod) full(t *testing.T, l *core.Limiter, clk *Clock) {
	t.Helper()
	clk.Add(2 * time.Minute)
	left := tc.end.Sub(clk.Now())
	d := allow(t, l, "k")
	if d.Allowed || d.Rule != 1 || d.RetryAfter != left || d.ResetAfter != left || d.Remaining != 0 {
		t.Fatalf("Allow(k) over the %v's 5 = %s, want denied by Rules[1] until the period ends: RetryAfter %v", tc.cal, show(d), left)
	}
	if d.Rules()[0].RetryAfter != 0 || d.Rules()[0].Used != 0 {
		t.Errorf("Allow(k) over the %v's 5: Rules[0] = %+v, want room", tc.cal, d.Rules()[0])
	}
	p := peek(t, l, "k")
	if p.Allowed || p.RetryAfter != left {
		t.Errorf("Peek(k) = %s, want denied, RetryAfter %v", show(p), left)
	}
	tc.checkRule(t, clk, "Peek(k)", p, 5, tc.length)

	clk.Set(tc.end.Add(-time.Microsecond))
	if d := allow(t, l, "k"); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Errorf("Allow(k) 1µs before the period ends = %s, want denied, RetryAfter 1µs", show(d))
	}
}

// nextPeriod checks that the next period counts afresh from its first
// microsecond, with its own length.
func (tc *calendarPeriod) nextPeriod(t *testing.T, l *core.Limiter, clk *Clock) {
	t.Helper()
	clk.Set(tc.end)
	d := allow(t, l, "k")
	if !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("Allow(k) as the next period begins = %s, want allowed by the store", show(d))
	}
	r := d.Rules()[1]
	if r.Used != 1 || r.Window != tc.next || r.ResetAfter != tc.next {
		t.Errorf("Allow(k) as the next period begins: Rules[1] = %+v, want Used 1, Window and ResetAfter %v", r, tc.next)
	}
}

// testCalendarConcurrent: concurrent requests from two instances on one
// store admit exactly a calendar rule's limit, under the store's own
// clock (in a zone where it is noon, far from a boundary).
func testCalendarConcurrent(t *testing.T, s *suite) {
	const (
		limit      = 150
		goroutines = 16
		each       = 16
	)
	noon := ZoneWithMidnightAt(time.Now().Truncate(time.Second).Add(12 * time.Hour))
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		st := s.store(t)
		p := core.Policy{Name: s.name(), Algorithm: algo,
			Rules: []core.Rule{{Limit: 1000, Window: time.Minute}, {Limit: limit, Calendar: core.Day, Location: noon}}}
		ls := instances(t, s, st, p, 2)
		allowed := hammer(t, ls, goroutines, each, func(d core.Decision) {
			if d.Rule != 1 || d.RetryAfter < 11*time.Hour {
				t.Errorf("Allow(k) = %s, want denied by the day's rule until midnight, some 12 h away", show(d))
			}
		})
		if allowed != limit {
			t.Errorf("%d x %d Allow(k) with %d a day: %d allowed, want exactly %d", goroutines, each, limit, allowed, limit)
		}
		d := peek(t, ls[0], "k")
		if r := d.Rules()[1]; r.Used != limit || r.Window != 24*time.Hour {
			t.Errorf("Peek(k): Rules[1] = %+v, want Used %d, Window 24h", r, limit)
		}
	})
}

// testCalendarBoundary checks at the store, on its own clock, that a
// period ends exactly at midnight by that clock: every Take and Peek
// across the boundary of a zone whose midnight is a second or two away is
// decided by the period that holds its own time (Result.At), with
// RetryAfter and ResetAfter running exactly to that period's end.
func testCalendarBoundary(t *testing.T, s *suite) {
	const limit = 2
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		st := s.store(t)
		retryTiming(t, func(key string) bool {
			boundary := time.Now().Truncate(time.Second).Add(2 * time.Second)
			b := boundary.UnixMicro()
			q := driver.Query{Policy: s.name(), Key: key, Algorithm: driver.Algorithm(algo), Buckets: 60, N: 1, Keep: limit,
				Rules: []driver.Rule{{Limit: limit, Calendar: driver.Day, Location: ZoneWithMidnightAt(boundary)}}}
			used := map[bool]int64{} // by "after the boundary"
			before := 0
			for i := 0; ; i++ {
				after := boundaryCall(t, st, q, i, b, used)
				if !after {
					before++
				}
				if after && used[true] == limit {
					break
				}
				time.Sleep(40 * time.Millisecond)
			}
			return before >= 6 // the old period was seen full
		})
	})
}

// boundaryCall makes call i of testCalendarBoundary to st, for q whose
// day ends at b (Unix microseconds): a Peek every third call, else a Take.
// It checks the call's result against used, the units taken in each
// period so far (by "after the boundary"), counts the unit it took there,
// and reports whether the store decided after the boundary.
func boundaryCall(t *testing.T, st core.Store, q driver.Query, i int, b int64, used map[bool]int64) (after bool) {
	t.Helper()
	limit := q.Rules[0].Limit
	var r driver.Result
	var err error
	if i%3 == 2 {
		r, err = st.Peek(ctx(t), q)
	} else {
		r, err = st.Take(ctx(t), q)
	}
	if err != nil {
		t.Fatalf("call %d: %v", i, err)
	}
	after = r.At >= b
	end := b
	if after {
		end = b + 24*3600*1e6
	}
	left := time.Duration(end-r.At) * time.Microsecond
	fits := used[after] < limit
	rs := r.Rules.All()[0]
	if r.Allowed != fits || rs.ResetAfter != left || rs.Window != 24*time.Hour || rs.Used != used[after]+boolInt(fits && i%3 != 2) {
		t.Fatalf("call %d at %d (boundary %d): %+v, want Allowed %v, Used %d, Window 24h, ResetAfter %v",
			i, r.At, b, r, fits, used[after]+boolInt(fits && i%3 != 2), left)
	}
	if !fits && rs.RetryAfter != left {
		t.Fatalf("call %d at %d: RetryAfter %v, want %v: the end of the period by the store's clock", i, r.At, rs.RetryAfter, left)
	}
	if fits && i%3 != 2 {
		used[after]++
	}
	return after
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// testCalendarRefundReset: a refund gives units back to the period that
// counted them (not to a later one), and Reset forgets every period.
func testCalendarRefundReset(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		clk := NewClock(time.Date(2024, 1, 31, 23, 0, 0, 0, time.UTC))
		l, _ := s.policyLimiter(t, core.Policy{Rules: []core.Rule{{Limit: 2, Calendar: core.Month}}, Algorithm: algo},
			core.WithClock(clk.Now))
		jan := allow(t, l, "k")
		allow(t, l, "k")
		if d := allow(t, l, "k"); d.Allowed {
			t.Fatalf("Allow(k) #3 with 2 a month = %s, want denied", show(d))
		}
		if err := jan.Refund(ctx(t)); err != nil {
			t.Fatal(err)
		}
		d := allow(t, l, "k")
		if !d.Allowed || d.Rules()[0].Used != 2 {
			t.Fatalf("Allow(k) after a refund = %s, want allowed, Used 2", show(d))
		}
		jan = d
		clk.Add(time.Hour) // February
		feb := allow(t, l, "k")
		if !feb.Allowed || feb.Rules()[0].Used != 1 {
			t.Fatalf("Allow(k) in February = %s, want allowed, Used 1", show(feb))
		}
		if err := jan.Refund(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if d := peek(t, l, "k"); d.Rules()[0].Used != 1 {
			t.Errorf("Peek(k) after refunding a January unit in February = Used %d, want 1", d.Rules()[0].Used)
		}
		if err := l.Reset(ctx(t), "k"); err != nil {
			t.Fatal(err)
		}
		if d := peek(t, l, "k"); !d.Allowed || d.Rules()[0].Used != 0 || d.Remaining != 2 {
			t.Errorf("Peek(k) after Reset = %s, want Used 0, Remaining 2", show(d))
		}
	})
}
