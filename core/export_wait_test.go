package core

// Waiting returns how many callers of WaitN wait for key on l, for the
// black-box tests.
func (l *Limiter) Waiting(key string) int {
	ws := l.queues()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.m[boundKey(key)]; q != nil {
		return len(q.line)
	}
	return 0
}

// AdmittedAt returns the store's time, in µs since the Unix epoch, at
// which the admission d recorded its units, for the black-box tests.
func AdmittedAt(d Decision) int64 { return d.ticket.at }
