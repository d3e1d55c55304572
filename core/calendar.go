package core

import (
	"fmt"
	"time"
)

// Calendar periods are computed here, in Go, where the time zone database
// is: a store gets each calendar rule's period boundaries in µs since the
// Unix epoch.

// dayStart returns the first instant whose date in loc is y-m-d or later
// (the date is normalised, so d may overflow its month). That is 00:00 on
// most days; where a clock change skips midnight it is the instant of the
// change, and where midnight happens twice it is the first.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	// Offsets lie within -12 h..+14 h: 40 hours before its UTC midnight,
	// the day has begun nowhere. Walk the zones from there: within one
	// zone the date only grows, so the first zone in which midnight
	// (or the zone's own start) falls holds the day's first instant.
	u := day.Add(-40 * time.Hour).In(loc)
	for range 8 {
		start, end := u.ZoneBounds()
		_, off := u.Zone()
		first := day.Add(-time.Duration(off) * time.Second)
		if first.Before(start) {
			first = start // the zone begins past midnight: a skipped one
		}
		if end.IsZero() || first.Before(end) {
			return first.In(loc)
		}
		u = end.In(loc)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc) // not reached with real zones
}

// periodStart returns the start of the k-th period of c after the one
// that holds t (k may be negative), in t's location.
func (c Calendar) periodStart(t time.Time, k int) time.Time {
	y, m, d := t.Date()
	switch c {
	case Day:
		d += k
	case Week:
		d += -(int(t.Weekday())+6)%7 + 7*k
	default: // Month
		d = 1
		m += time.Month(k)
	}
	return dayStart(y, m, d, t.Location())
}

// bounds returns four consecutive period boundaries of c in loc (UTC when
// nil) around t, in µs: the start of the period before t's, the start of
// t's, its end, and the end of the next. A store that decides by its own
// clock picks from them the period that holds its time, so that a
// boundary is exact to its clock even when t, the caller's, differs from
// it by up to a period.
func (c Calendar) bounds(loc *time.Location, t int64) [4]int64 {
	if loc == nil {
		loc = time.UTC
	}
	lt := time.UnixMicro(t).In(loc)
	var b [4]int64
	for i := range b {
		b[i] = c.periodStart(lt, i-1).UnixMicro()
	}
	return b
}

// period returns the start and end, in µs, of the period of c in loc
// that holds t.
func (c Calendar) period(loc *time.Location, t int64) (start, end int64) {
	if loc == nil {
		loc = time.UTC
	}
	lt := time.UnixMicro(t).In(loc)
	return c.periodStart(lt, 0).UnixMicro(), c.periodStart(lt, 1).UnixMicro()
}

// pick returns the period of the boundaries b that holds t: the first
// when t is before b[1], the last when t is at or after b[2]. A store
// picks by its own clock.
func pick(b [4]int64, t int64) (start, end int64) {
	switch {
	case t < b[1]:
		return b[0], b[1]
	case t < b[2]:
		return b[1], b[2]
	}
	return b[2], b[3]
}

// checkCalendars refuses a query's unknown calendar periods: a store
// called without a Limiter (which validates them) could not count them.
func checkCalendars(rules []Rule) error {
	for i := range rules {
		if rules[i].Calendar > Month {
			return fmt.Errorf("Rules[%d].Calendar: unknown %v: %w", i, rules[i].Calendar, ErrInvalidPolicy)
		}
	}
	return nil
}

// Period returns the start and end of the calendar period of r that holds
// t, in r's Location (UTC when nil): for a Day, 00:00 that day to 00:00
// the next. It returns zero times for a sliding rule.
func (r Rule) Period(t time.Time) (start, end time.Time) {
	if r.Calendar == 0 {
		return time.Time{}, time.Time{}
	}
	s, e := r.Calendar.period(r.Location, t.UnixMicro())
	return time.UnixMicro(s), time.UnixMicro(e)
}
