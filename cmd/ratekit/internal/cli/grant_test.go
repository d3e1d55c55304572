package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestGrantCommands: ratekit grant gives a key more units, which the
// app's limiter admits at once; peek shows the grant (text and JSON, and
// on a key Redis holds nothing else for); revoke ends it; mistakes are
// usage errors.
func TestGrantCommands(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	ctx := context.Background()
	login := testkit.Limiter(t, redisstore.New(srv.Client(t)), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}},
		core.WithTimeout(2*time.Second))
	admit := func(key string, n int) int {
		t.Helper()
		got := 0
		for range n {
			d, err := login.Allow(ctx, key)
			if err != nil || d.Source != core.SourceStore && (d.Source != core.SourceCache || d.Allowed) {
				t.Fatalf("Allow(%q) = %+v, %v", key, d, err)
			}
			if d.Allowed {
				got++
			}
		}
		return got
	}
	if got := admit("alice", 3); got != 2 {
		t.Fatalf("admitted %d of 3, want 2", got)
	}
	code, out, errOut := exec(t, url, "grant", "-policy", "login", "-extra", "3", "-for", "24h", "-by", "ann", "-note", "ticket 7", "alice")
	if code != 0 || !strings.Contains(out, `grant login key "alice": 3 more units on every rule until `) || !strings.Contains(out, "by ann: ticket 7") {
		t.Fatalf("grant = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = exec(t, url, "peek", "-policy", "login", "-rules", "2/1h", "alice")
	if code != 0 || !strings.Contains(out, "grant: 3 more units on every rule until") || !strings.Contains(out, "a request now: allowed") || !strings.Contains(out, "rule 5/1h0m0s: used 2, remaining 3") {
		t.Fatalf("peek = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// The limiter's deny cache forgets alice's denial once it hears of
	// the grant, which the store announces to every instance.
	testkit.WaitUntil(t, "the limiter hears of the grant", func() bool {
		d, err := login.Peek(ctx, "alice")
		return err == nil && d.Grant != nil
	})
	got := 0
	testkit.WaitUntil(t, "the deny cache forgets alice", func() bool {
		if d, err := login.Allow(ctx, "alice"); err == nil && d.Allowed {
			got++
			return true
		}
		return false
	})
	if got += admit("alice", 4); got != 3 {
		t.Fatalf("admitted %d of the requests after the grant, want 3", got)
	}
	// A key Redis holds nothing else for is found by its grant.
	if code, out, errOut = exec(t, url, "grant", "-policy", "login", "-exempt", "-until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "bob"); code != 0 {
		t.Fatalf("grant -exempt = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = exec(t, url, "peek", "-policy", "login", "-json", "bob")
	var pj peekJSON
	if code != 0 || json.Unmarshal([]byte(out), &pj) != nil || pj.Grant == nil || !pj.Grant.Exempt {
		t.Fatalf("peek -json bob = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got := admit("bob", 6); got != 6 {
		t.Fatalf("admitted %d of 6 while exempt, want 6", got)
	}
	if code, out, errOut = exec(t, url, "revoke", "-policy", "login", "bob", "alice"); code != 0 || strings.Count(out, "grant revoked") != 2 {
		t.Fatalf("revoke = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got := admit("bob", 3); got != 2 {
		t.Fatalf("admitted %d of 3 after the revocation, want 2: the exempt requests counted nowhere", got)
	}
	if code, out, _ = exec(t, url, "peek", "-policy", "login", "alice"); code != 0 || strings.Contains(out, "grant:") {
		t.Fatalf("peek after the revocation = %d\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"grant", "-extra", "3", "-for", "1h", "k"}, "-policy is required"},
		{[]string{"grant", "-policy", "login", "-extra", "3", "-for", "1h"}, "one or more keys"},
		{[]string{"grant", "-policy", "login", "-for", "1h", "k"}, "-extra N or -exempt"},
		{[]string{"grant", "-policy", "login", "-extra", "3", "-exempt", "-for", "1h", "k"}, "-extra N or -exempt"},
		{[]string{"grant", "-policy", "login", "-extra", "3", "k"}, "-for or -until"},
		{[]string{"grant", "-policy", "login", "-extra", "3", "-for", "soon", "k"}, "positive duration"},
		{[]string{"grant", "-policy", "login", "-extra", "3", "-until", "2001-01-01T00:00:00Z", "k"}, "time to come"},
	} {
		if code, _, errOut := exec(t, url, tc.args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v = %d\n%s\nwant a usage error naming %q", tc.args, code, errOut, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"grant", "-policy", "login", "-extra", "3", "-for", "800h", "k"}, "30 days"},
		{[]string{"grant", "-policy", "login", "-extra", "100000", "-for", "1h", "k"}, "SlidingLog"},
	} {
		if code, _, errOut := exec(t, url, tc.args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v = %d\n%s\nwant refused (a usage error) naming %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, out, errOut := exec(t, url, "grant", "-policy", "quota", "-algorithm", "buckets", "-extra", "1000000", "-for", "1h", "k"); code != 0 {
		t.Errorf("grant -algorithm buckets -extra 1000000 = %d\n%s%s", code, out, errOut)
	}
}
