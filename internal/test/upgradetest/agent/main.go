// Command agent is one app instance of ratekit for the upgrade test
// (package upgradetest): it builds limiters on a Redis and decides what it
// is told, one JSON request per line on its standard input, one JSON
// answer per line on its standard output, until its input ends.
//
// The same source is built twice: in the working tree, and in a tree of
// the previous release extracted from the repository's history (the
// test copies it there). So it uses only what every release it is built
// against offers: core.NewLimiter and its options, redisstore.New, the
// Limiter's Allow, Peek, Reset, Pass and Decision.Refund.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// request is one line of the agent's input.
type request struct {
	Op string `json:"op"` // limiter, allow, peek, refund, reset, pass
	// limiter: name the limiter, on the Redis at Addr, of Policy; every
	// key of Tiers' map is in the tier it names.
	Name   string            `json:"name"`
	Addr   string            `json:"addr,omitempty"`
	Policy *policy           `json:"policy,omitempty"`
	Tiers  map[string][]rule `json:"tiers,omitempty"`
	TierOf map[string]string `json:"tier_of,omitempty"`
	// allow, peek, reset, pass: Key, N units at Now (µs since the epoch:
	// the limiters' clock, which every decision sets).
	Key string `json:"key,omitempty"`
	N   int64  `json:"n,omitempty"`
	Now int64  `json:"now,omitempty"`
	// refund: the ticket an admission returned.
	Ticket int `json:"ticket,omitempty"`
}

type policy struct {
	Name     string `json:"name"`
	Rules    []rule `json:"rules"`
	Buckets  bool   `json:"buckets,omitempty"`
	LockFor  int64  `json:"lock_for_ms,omitempty"`
	LockMax  int64  `json:"lock_max_ms,omitempty"`
	InFlight int64  `json:"in_flight,omitempty"`
	LeaseTTL int64  `json:"lease_ttl_ms,omitempty"`
}

type rule struct {
	Limit     int64  `json:"limit"`
	WindowMS  int64  `json:"window_ms,omitempty"`
	Calendar  string `json:"calendar,omitempty"` // day, week, month
	Challenge int64  `json:"challenge,omitempty"`
}

// answer is one line of the agent's output.
type answer struct {
	Err        string `json:"err,omitempty"`
	Allowed    bool   `json:"allowed"`
	Remaining  int64  `json:"remaining"`
	RetryAfter int64  `json:"retry_after_us"`
	Locked     bool   `json:"locked,omitempty"`
	Challenged bool   `json:"challenged,omitempty"`
	Source     string `json:"source,omitempty"`
	Ticket     int    `json:"ticket,omitempty"`
}

type agent struct {
	mu       sync.Mutex
	now      time.Time
	limiters map[string]*core.Limiter
	tickets  map[int]*core.Decision
	clients  map[string]*redis.Client
}

func main() {
	a := &agent{now: time.Now(), limiters: map[string]*core.Limiter{}, tickets: map[int]*core.Decision{}, clients: map[string]*redis.Client{}}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		ans := answer{}
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			ans.Err = err.Error()
		} else if err := a.do(&r, &ans); err != nil {
			ans.Err = err.Error()
		}
		if err := out.Encode(ans); err != nil {
			os.Exit(1)
		}
	}
}

func (a *agent) clock() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.now
}

func (a *agent) do(r *request, ans *answer) error {
	ctx := context.Background()
	if r.Now != 0 {
		a.mu.Lock()
		a.now = time.UnixMicro(r.Now)
		a.mu.Unlock()
	}
	if r.Op == "limiter" {
		return a.limiter(r)
	}
	l := a.limiters[r.Name]
	if l == nil && r.Op != "refund" {
		return fmt.Errorf("no limiter %q", r.Name)
	}
	switch r.Op {
	case "allow", "peek":
		var d core.Decision
		var err error
		if r.Op == "allow" {
			d, err = l.AllowN(ctx, r.Key, max(1, r.N))
		} else {
			d, err = l.Peek(ctx, r.Key)
		}
		if err != nil {
			return err
		}
		ans.Allowed, ans.Remaining, ans.RetryAfter = d.Allowed, d.Remaining, d.RetryAfter.Microseconds()
		ans.Locked, ans.Challenged, ans.Source = d.Locked, d.Challenged, d.Source.String()
		if d.Allowed && r.Op == "allow" {
			ans.Ticket = len(a.tickets) + 1
			a.tickets[ans.Ticket] = &d
		}
		return nil
	case "refund":
		d := a.tickets[r.Ticket]
		if d == nil {
			return fmt.Errorf("no ticket %d", r.Ticket)
		}
		return d.Refund(ctx)
	case "reset":
		return l.Reset(ctx, r.Key)
	case "pass":
		return l.Pass(ctx, r.Key)
	}
	return fmt.Errorf("unknown op %q", r.Op)
}

// limiter builds the limiter r names.
func (a *agent) limiter(r *request) error {
	if r.Policy == nil {
		return fmt.Errorf("limiter %q: no policy", r.Name)
	}
	rdb := a.clients[r.Addr]
	if rdb == nil {
		rdb = redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		a.clients[r.Addr] = rdb
	}
	p := core.Policy{Name: r.Policy.Name, Rules: rules(r.Policy.Rules), InFlight: r.Policy.InFlight,
		Lockout:  core.Lockout{For: time.Duration(r.Policy.LockFor) * time.Millisecond, Max: time.Duration(r.Policy.LockMax) * time.Millisecond},
		LeaseTTL: time.Duration(r.Policy.LeaseTTL) * time.Millisecond}
	if r.Policy.Buckets {
		p.Algorithm = core.SlidingBuckets
	}
	// A generous timeout: the test checks what the stores decide, and a
	// fallback decision would blur it (the answer names its source).
	opts := []core.Option{core.WithClock(a.clock), core.WithTimeout(5 * time.Second)}
	if len(r.Tiers) > 0 {
		tiers := map[string][]core.Rule{}
		for name, rs := range r.Tiers {
			tiers[name] = rules(rs)
		}
		tierOf := r.TierOf
		opts = append(opts, core.WithTiers(func(_ context.Context, key string) (string, error) { return tierOf[key], nil }, tiers))
	}
	l, err := core.NewLimiter(redisstore.New(rdb), p, opts...)
	if err != nil {
		return err
	}
	a.limiters[r.Name] = l
	return nil
}

func rules(rs []rule) []core.Rule {
	out := make([]core.Rule, len(rs))
	for i, r := range rs {
		out[i] = core.Rule{Limit: r.Limit, Window: time.Duration(r.WindowMS) * time.Millisecond, Challenge: r.Challenge}
		switch r.Calendar {
		case "day":
			out[i].Calendar = core.Day
		case "week":
			out[i].Calendar = core.Week
		case "month":
			out[i].Calendar = core.Month
		}
	}
	return out
}
