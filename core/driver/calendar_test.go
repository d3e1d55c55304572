package driver

import (
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// TestCalendarPeriod checks the periods of calendar rules where clocks
// change: the first instant of a day is midnight, or the change itself
// where midnight is skipped, or the first of two midnights; weeks start
// on Monday (ISO 8601) across a year's end; months have their lengths.
func TestCalendarPeriod(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	havana := mustZone(t, "America/Havana")
	santiago := mustZone(t, "America/Santiago")
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name       string
		cal        Calendar
		loc        *time.Location
		at         string // RFC 3339
		start, end string // RFC 3339
	}{
		{"Paris day of 23 h", Day, paris, "2025-03-30T12:00:00+02:00", "2025-03-30T00:00:00+01:00", "2025-03-31T00:00:00+02:00"},
		{"Paris day of 25 h", Day, paris, "2025-10-26T02:30:00+01:00", "2025-10-26T00:00:00+02:00", "2025-10-27T00:00:00+01:00"},
		{"Paris last µs of a day", Day, paris, "2025-10-26T23:59:59.999999+01:00", "2025-10-26T00:00:00+02:00", "2025-10-27T00:00:00+01:00"},
		{"Havana: midnight skipped, the day starts at 01:00", Day, havana, "2024-03-10T12:00:00-04:00", "2024-03-10T01:00:00-04:00", "2024-03-11T00:00:00-04:00"},
		{"Havana: the day before ends with the change", Day, havana, "2024-03-09T23:30:00-05:00", "2024-03-09T00:00:00-05:00", "2024-03-10T01:00:00-04:00"},
		{"Havana: midnight twice, the first", Day, havana, "2024-11-03T00:30:00-05:00", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"},
		{"Santiago: 23:00 twice, the day ends at the second midnight", Day, santiago, "2024-04-06T23:30:00-04:00", "2024-04-06T00:00:00-03:00", "2024-04-07T00:00:00-04:00"},
		{"Santiago: midnight skipped", Day, santiago, "2024-09-08T10:00:00-03:00", "2024-09-08T01:00:00-03:00", "2024-09-09T00:00:00-03:00"},
		{"ISO week across New Year", Week, nil, "2025-01-01T10:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		{"ISO week on a Sunday", Week, paris, "2024-03-03T23:59:00+01:00", "2024-02-26T00:00:00+01:00", "2024-03-04T00:00:00+01:00"},
		{"ISO week on a Monday's first µs", Week, paris, "2024-03-04T00:00:00+01:00", "2024-03-04T00:00:00+01:00", "2024-03-11T00:00:00+01:00"},
		{"leap February", Month, nil, "2024-02-29T23:59:59Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"February", Month, nil, "2023-02-14T00:00:00Z", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z"},
		{"Paris month with a clock change", Month, paris, "2024-10-31T23:00:00+01:00", "2024-10-01T00:00:00+02:00", "2024-11-01T00:00:00+01:00"},
		{"December to January", Month, paris, "2024-12-31T23:59:59+01:00", "2024-12-01T00:00:00+01:00", "2025-01-01T00:00:00+01:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := utc(tc.at).UnixMicro()
			start, end := Rule{Calendar: tc.cal, Location: tc.loc}.PeriodMicros(at)
			if want := utc(tc.start).UnixMicro(); start != want {
				t.Errorf("%v.period(%s) start = %v, want %s", tc.cal, tc.at, time.UnixMicro(start).In(loc(tc.loc)), tc.start)
			}
			if want := utc(tc.end).UnixMicro(); end != want {
				t.Errorf("%v.period(%s) end = %v, want %s", tc.cal, tc.at, time.UnixMicro(end).In(loc(tc.loc)), tc.end)
			}
			// The periods around it, as a driver finds them: the one
			// before ends where this one starts, the next starts where
			// this one ends.
			r := Rule{Calendar: tc.cal, Location: tc.loc}
			ps, pe := r.PeriodMicros(start - 1)
			ns, ne := r.PeriodMicros(end)
			if pe != start || ns != end || ps >= pe || ns >= ne {
				t.Errorf("periods around %s: [%d, %d) and [%d, %d), want them to meet [%d, %d)", tc.at, ps, pe, ns, ne, start, end)
			}
		})
	}
}

func loc(l *time.Location) *time.Location {
	if l == nil {
		return time.UTC
	}
	return l
}

// TestPeriodSliding: a sliding rule has no period.
func TestPeriodSliding(t *testing.T) {
	s, e := Rule{Limit: 1, Window: time.Second}.Period(time.Now())
	if !s.IsZero() || !e.IsZero() {
		t.Errorf("Period of a sliding rule = %v, %v, want zero times", s, e)
	}
}
