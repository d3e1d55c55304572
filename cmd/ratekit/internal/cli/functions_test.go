package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestFunctions: `ratekit functions` lists ratekit's libraries and who
// runs them; -prune deletes those no live instance runs: an earlier
// release's, and v0.1.0's once none of its instances announces itself.
func TestFunctions(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	const gone = "ratekit_0123456789ab"
	legacy := redislib.LegacyLibraries[0]
	// This release's library, loaded already: the store prunes nothing.
	srv.Do(t, "FUNCTION", "LOAD", redislib.LibCode)
	l := testkit.Limiter(t, redisstore.New(srv.Client(t)), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}})
	_ = l.Check(context.Background()) // announces it
	// An instance of v0.1.0 runs, and one of a release whose instances
	// stopped ran.
	for _, lib := range []string{gone, legacy} {
		srv.Do(t, "FUNCTION", "LOAD", "#!lua name="+lib+"\nredis.register_function('"+lib+"_f', function() return 1 end)")
	}
	srv.Do(t, "ZADD", "ratekit:login:fleet", time.Now().Add(time.Minute).UnixMilli(), "v010instance")

	code, out, errOut := exec(t, url, "functions")
	if code != 0 {
		t.Fatalf("functions: exit %d, %s", code, errOut)
	}
	for _, want := range []string{redislib.LibName + "  this release's, run by 1 live", legacy + "  v0.1.0's, run by 1 live", gone + "  run by no live instance"} {
		if !strings.Contains(out, want) {
			t.Errorf("functions printed %q, want a line %q", out, want)
		}
	}
	srv.Do(t, "DEL", "ratekit:login:fleet") // the v0.1.0 instance stopped
	code, out, errOut = exec(t, url, "functions", "-prune")
	if code != 0 || !strings.Contains(out, "deleted "+gone) || !strings.Contains(out, "deleted "+legacy) {
		t.Fatalf("functions -prune: exit %d, %q %q; want %s and %s deleted", code, out, errOut, gone, legacy)
	}
	code, out, _ = exec(t, url, "functions")
	if code != 0 || strings.Contains(out, gone) || strings.Contains(out, legacy) || !strings.Contains(out, redislib.LibName) {
		t.Errorf("functions after -prune: exit %d, %q; want this release's library alone", code, out)
	}
}
