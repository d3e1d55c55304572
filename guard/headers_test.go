package guard_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// TestHeaderWriters: WriteHTTPHeaders and Metadata write exactly the
// fields WriteHeaders does (canonical and lowercase names), each answer's
// values are its own, and long IETF values are whole.
func TestHeaderWriters(t *testing.T) {
	ctx := context.Background()
	for _, style := range []guard.HeaderStyle{guard.HeadersXRateLimit, guard.HeadersIETF, guard.HeadersXRateLimit | guard.HeadersIETF} {
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("writers", core.Rule{Limit: 50_000, Window: 90 * time.Second}, core.Rule{Limit: 100_000, Window: 24 * time.Hour}))
		g := guard.New(l, guard.WithHeaders(style), guard.WithKey(testkit.UserKey))
		first := g.Admit(ctx, req().with("X-User", "alice"))
		want := headers(&first)
		h := http.Header{}
		if style&guard.HeadersXRateLimit != 0 {
			h.Set(guard.HeaderLimit, "stale") // replaced
		}
		first.WriteHTTPHeaders(h)
		md := first.Metadata()
		// A second answer must not change what the first one wrote.
		second := g.Admit(ctx, req().with("X-User", "bob"))
		second.WriteHTTPHeaders(http.Header{})
		_ = second.Metadata()
		if len(h) != len(want) || len(md) != len(want) {
			t.Errorf("style %v: %d http fields, %d metadata keys, want %d: %v / %v / %v", style, len(h), len(md), len(want), h, md, want)
		}
		for name, val := range want {
			if got := h[name]; len(got) != 1 || got[0] != val {
				t.Errorf("style %v: http %s = %q, want [%q]", style, name, got, val)
			}
			if got := md[strings.ToLower(name)]; len(got) != 1 || got[0] != val {
				t.Errorf("style %v: metadata %s = %q, want [%q]", style, strings.ToLower(name), got, val)
			}
		}
		if style == guard.HeadersXRateLimit && (want[guard.HeaderLimit] != "50000" || want[guard.HeaderRemaining] != "49999" || want[guard.HeaderReset] != "90") {
			t.Errorf("X-RateLimit fields = %v, want 50000, 49999, 90", want)
		}
	}
	// No fields, no map.
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("none", testkit.PerHour(1))), guard.WithHeaders(guard.HeadersNone))
	v := g.Admit(ctx, req())
	if md := v.Metadata(); md != nil {
		t.Errorf("Metadata with HeadersNone = %v, want nil", md)
	}
	h := http.Header{}
	v.WriteHTTPHeaders(h)
	if len(h) != 0 {
		t.Errorf("WriteHTTPHeaders with HeadersNone wrote %v", h)
	}
}

// TestHeaderAllocations: the X-RateLimit fields of an allowed request, or
// the IETF fields of a policy of two rules, cost one allocation in an
// http.Header.
func TestHeaderAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("allocs", core.Rule{Limit: 100_000, Window: time.Hour})))
	v := g.Admit(context.Background(), req())
	h := http.Header{"Content-Type": {"application/json"}}
	if n := testing.AllocsPerRun(100, func() { v.WriteHTTPHeaders(h) }); n != 1 {
		t.Errorf("WriteHTTPHeaders: %v allocations, want 1", n)
	}
	// The IETF fields of two rules too.
	g = guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("allocs-ietf",
		core.Rule{Limit: 100_000, Window: time.Hour}, core.Rule{Limit: 100_000, Window: 2 * time.Hour})), guard.WithHeaders(guard.HeadersIETF))
	v = g.Admit(context.Background(), req())
	write := func() {
		// The IETF fields add up: start from none each time.
		delete(h, guard.HeaderPolicy)
		delete(h, guard.HeaderRateLimit)
		v.WriteHTTPHeaders(h)
	}
	if n := testing.AllocsPerRun(100, write); n != 1 {
		t.Errorf("WriteHTTPHeaders, IETF fields of two rules: %v allocations, want 1", n)
	}
}

// TestAdmitHTTPReusesViews: AdmitHTTP's pooled views carry nothing from
// one request to the next: not the body, the route or the locals.
func TestAdmitHTTPReusesViews(t *testing.T) {
	ctx := context.Background()
	var seen []string
	key := func(r keyfunc.Request) (string, error) {
		b, err := r.Body(64)
		if err != nil {
			return "", err
		}
		v, _ := r.Value("who").(string)
		seen = append(seen, r.Route()+"|"+string(b)+"|"+v)
		return "k", nil
	}
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("views", testkit.PerHour(100))), guard.WithKey(key))
	who := keyfunc.LocalsFunc(func(k any) any {
		if k == "who" {
			return "alice"
		}
		return nil
	})
	r1 := httptest.NewRequest(http.MethodPost, "/a", strings.NewReader("first body"))
	if v := g.AdmitHTTP(ctx, r1, "/a", who); v.Outcome != guard.OutcomeAllow {
		t.Fatalf("first: %v %v", v.Outcome, v.Err)
	}
	r2 := httptest.NewRequest(http.MethodGet, "/b", nil)
	if v := g.AdmitHTTP(ctx, r2, "", nil); v.Outcome != guard.OutcomeAllow {
		t.Fatalf("second: %v %v", v.Outcome, v.Err)
	}
	if want := []string{"/a|first body|alice", "||"}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("views saw %q, want %q", seen, want)
	}
	// The handler still reads the whole first body.
	if b, _ := io.ReadAll(r1.Body); string(b) != "first body" {
		t.Errorf("body left for the handler = %q", b)
	}
}

// TestWriteHeaderBytes: WriteHeaderBytes makes the calls WriteHeaderFields
// makes, in the same order, with the same values, for allowed and denied
// answers whose values fit its buffer or not, and allocates nothing.
func TestWriteHeaderBytes(t *testing.T) {
	ctx := context.Background()
	rules := []core.Rule{{Limit: 2, Window: 90 * time.Second}, {Limit: 100_000, Window: 24 * time.Hour},
		{Limit: 99_999, Window: 48 * time.Hour}, {Limit: 99_998, Window: 72 * time.Hour}}
	for _, style := range []guard.HeaderStyle{guard.HeadersNone, guard.HeadersXRateLimit, guard.HeadersIETF, guard.HeadersXRateLimit | guard.HeadersIETF} {
		g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("bytes", rules...)),
			guard.WithHeaders(style), guard.WithKey(testkit.UserKey))
		for i := range 3 { // allowed, allowed, denied
			v := g.Admit(ctx, req().with("X-User", "alice"))
			var want, got []string
			v.WriteHeaderFields(
				func(name, value string) { want = append(want, "set "+name+": "+value) },
				func(name, value string) { want = append(want, "add "+name+": "+value) })
			v.WriteHeaderBytes(
				func(name string, value []byte) { got = append(got, "set "+name+": "+string(value)) },
				func(name string, value []byte) { got = append(got, "add "+name+": "+string(value)) })
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("style %v, request %d: WriteHeaderBytes made\n%s\nwant\n%s", style, i, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	if race.Enabled {
		return // allocation counts differ under the race detector
	}
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("bytes-allocs", core.Rule{Limit: 100_000, Window: time.Hour})))
	v := g.Admit(ctx, req())
	var n int
	count := func(string, []byte) { n++ }
	if a := testing.AllocsPerRun(100, func() { v.WriteHeaderBytes(count, count) }); a != 0 {
		t.Errorf("WriteHeaderBytes: %v allocations, want 0", a)
	}
	if n == 0 {
		t.Error("WriteHeaderBytes wrote no field")
	}
}

// TestIETFPartitionKeys: every item of the IETF fields carries the
// partition key of its own limit and key, in both fields, however many
// limits admitted the request.
func TestIETFPartitionKeys(t *testing.T) {
	ctx := context.Background()
	pk := func(policy, key string) string {
		h := sha256.Sum256([]byte(policy + "\x00" + key))
		return base64.StdEncoding.EncodeToString(h[:9])
	}
	opts := []guard.Option{guard.WithHeaders(guard.HeadersIETF), guard.WithKey(testkit.UserKey)}
	var want []string
	for i := range 6 {
		name := "pk-also-" + strconv.Itoa(i)
		key := keyfunc.Func(func(keyfunc.Request) (string, error) { return "k" + strconv.Itoa(i), nil })
		opts = append(opts, guard.WithAlso(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy(name, testkit.PerHour(10))), key))
		want = append(want, `"`+name+`";`+"%s;pk=:"+pk(name, "k"+strconv.Itoa(i))+":")
	}
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("pk-own", testkit.PerHour(10))), opts...)
	v := g.Admit(ctx, req().with("X-User", "alice"))
	want = append([]string{`"pk-own";%s;pk=:` + pk("pk-own", "alice") + ":"}, want...)
	h := headers(&v)
	for field, params := range map[string]string{guard.HeaderPolicy: "q=10;w=3600", guard.HeaderRateLimit: "r=9;t=3600"} {
		var items []string
		for _, w := range want {
			items = append(items, strings.Replace(w, "%s", params, 1))
		}
		if got := h[field]; got != strings.Join(items, ", ") {
			t.Errorf("%s = %s\nwant %s", field, got, strings.Join(items, ", "))
		}
	}
}
