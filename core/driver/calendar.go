package driver

import "time"

// Calendar periods are computed here, in Go, where the time zone database
// is: a store that decides in a server of its own (Lua in Redis) gets the
// period boundaries in µs since the Unix epoch from its driver.

// Period returns the start and end of the calendar period of r that holds
// t, in r's Location (UTC when nil): for a Day, 00:00 that day to 00:00
// the next. It returns zero times for a sliding rule.
func (r Rule) Period(t time.Time) (start, end time.Time) {
	if r.Calendar == 0 {
		return time.Time{}, time.Time{}
	}
	loc := r.Location
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	return r.Calendar.periodStart(lt, 0), r.Calendar.periodStart(lt, 1)
}

// PeriodMicros is [Rule.Period] in µs since the Unix epoch, for t in µs.
func (r Rule) PeriodMicros(t int64) (start, end int64) {
	s, e := r.Period(time.UnixMicro(t))
	return s.UnixMicro(), e.UnixMicro()
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
