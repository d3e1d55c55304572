package cli

import (
	"bytes"
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

// exec runs the CLI with REDIS_URL set to url.
func exec(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return ""
	}
	code = Run(context.Background(), args, env, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommands(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	ctx := context.Background()
	store := redisstore.New(srv.Client(t))
	login := testkit.Limiter(t, store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}, {Limit: 20, Window: 24 * time.Hour}}},
		core.WithTimeout(2*time.Second))
	quota := testkit.Limiter(t, store, core.Policy{Name: "quota", Rules: []core.Rule{{Limit: 1000, Window: 24 * time.Hour}}, Algorithm: core.SlidingBuckets},
		core.WithTimeout(2*time.Second))
	for range 5 {
		if d, err := login.Allow(ctx, "alice@example.com"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
	}
	if _, err := login.Allow(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := quota.AllowN(ctx, "app-1", 7); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // substrings of stdout (or of stderr when wantCode != 0)
	}{
		{"peek locked out", []string{"peek", "-policy", "login", "-rules", "5/15m,20/1d", "alice@example.com"}, 0,
			[]string{`policy login, key "alice@example.com" (Redis key ratekit:login:{alice@example.com})`,
				"a request now: denied, retry after 1", // 15m0s or, on a slow run, 14m59s
				"rule 5/15m0s: used 5, remaining 0, full: retry after 1",
				"rule 20/24h0m0s: used 5, remaining 15, empty in 2"}},
		{"peek buckets", []string{"peek", "-policy", "quota", "-rules", "1000/24h", "-algorithm", "buckets", "app-1"}, 0,
			[]string{"a request now: allowed", "rule 1000/24h0m0s: used 7, remaining 993"}},
		{"peek without rules", []string{"peek", "-policy", "login", "alice@example.com"}, 0,
			[]string{"Redis holds:", "sliding log: 5 units, admitted from ", "; the key expires in ", "a request now: allowed unless a rule is full"}},
		{"peek buckets without rules", []string{"peek", "-policy", "quota", "app-1"}, 0,
			[]string{"(Redis key ratekit:quota:{app-1}:b)", "sliding buckets: 7 units in 1 bucket of 24m0s"}},
		{"policies", []string{"policies"}, 0,
			[]string{"login                               2            0", "quota                               0            1"}},
		{"reset", []string{"reset", "-policy", "login", "alice@example.com"}, 0, []string{`reset login "alice@example.com"`}},
		{"peek after reset", []string{"peek", "-policy", "login", "-rules", "5/15m", "alice@example.com"}, 3,
			[]string{`nothing found for key "alice@example.com"`}},
		{"policies after reset", []string{"policies"}, 0, []string{"login                               1            0"}},
		{"unknown command", []string{"unlock"}, 2, []string{`unknown command "unlock"`, "usage: ratekit peek|reset|policies"}},
		{"no command", nil, 2, []string{"usage: ratekit", "commands:"}},
		{"peek nothing", []string{"peek", "-policy", "login", "alice"}, 3,
			[]string{`ratekit peek: nothing found for key "alice" under policy login (Redis key ratekit:login:{alice}, in redis://`,
				`hint: is it the key as the app stores it, under this -policy and -prefix ("ratekit")?`}},
		{"peek an account as a key", []string{"peek", "-policy", "login", "-rules", "5/15m", "carol@example.com"}, 3,
			[]string{`nothing found for key "carol@example.com"`,
				`hint: "carol@example.com" looks like an account: an app that keys by it with keyfunc/personal stores a pseudonym; give -account (with the app's RATEKIT_KEY_SECRET)`}},
		{"peek a phone as a key", []string{"peek", "-policy", "sms", "+86 138 0013 8000"}, 3,
			[]string{`looks like a phone: an app that keys by it with keyfunc/personal stores a pseudonym; give -phone`}},
		{"policies under another prefix", []string{"policies", "-prefix", "myapp"}, 3,
			[]string{`ratekit policies: no policy found: no key under the prefix "myapp" (in redis://`,
				`hint: is "myapp" the app's key prefix (redisstore.WithPrefix)?`}},
		{"peek bad rule", []string{"peek", "-policy", "login", "-rules", "5per15m", "alice"}, 2, []string{`rule "5per15m": want LIMIT/WINDOW`}},
		{"peek bad policy", []string{"peek", "-policy", "", "-rules", "5/15m", "alice"}, 2, []string{"ratekit peek: policy Name is empty"}},
		{"peek two keys", []string{"peek", "-policy", "login", "-rules", "5/15m", "a", "b"}, 2, []string{"exactly one key"}},
		{"reset without policy", []string{"reset", "alice"}, 2, []string{"-policy is required", "usage: ratekit reset -policy NAME"}},
		{"unknown flag", []string{"reset", "-polcy", "login", "alice"}, 2, []string{"flag provided but not defined: -polcy"}},
		{"reset nothing", []string{"reset", "-policy", "login", "nobody"}, 3,
			[]string{`ratekit reset: nothing found for key "nobody" under policy login, nothing deleted (in redis://`,
				"hint: is it the key as the app stores it"}},
		{"reset two, one found", []string{"reset", "-policy", "login", "nobody", "bob"}, 3,
			[]string{"nothing found for 1 of the 2 keys under policy login", "hint: is it the key as the app stores it"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			code, stdout, stderr := exec(t, url, s.args...)
			if code != s.wantCode {
				t.Fatalf("ratekit %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.args, code, s.wantCode, stdout, stderr)
			}
			out := stdout
			if s.wantCode != 0 {
				out = stderr
			}
			for _, w := range s.want {
				if !strings.Contains(out, w) {
					t.Errorf("ratekit %v: output lacks %q:\n%s", s.args, w, out)
				}
			}
			// Every line says ratekit once, at its start ("ratekit
			// peek: "), not again where it quotes the library.
			for _, line := range strings.Split(stderr, "\n") {
				if _, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(line, "ratekit ") && strings.Contains(rest, "ratekit: ") {
					t.Errorf("ratekit %v: stderr says ratekit twice:\n%s", s.args, line)
				}
			}
			// A mistake gets the error and one line of help, not the
			// whole usage (which only help, or no command, prints).
			if s.wantCode != 0 && s.args != nil && strings.Count(strings.TrimSpace(stderr), "\n") > 2 {
				t.Errorf("ratekit %v: stderr has more than the error and one line of help:\n%s", s.args, stderr)
			}
		})
	}

	// Keys in the layout of earlier versions, a lockout and calendar
	// counts apart from the key's hash, count as LOCKOUT+CAL, and a line
	// says how many there are.
	t.Run("policies with earlier keys", func(t *testing.T) {
		rdb := srv.Client(t)
		if err := rdb.Set(ctx, "ratekit:old:{zed}:l", "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, "ratekit:old:{zed}:c", "d", "1").Err(); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := exec(t, url, "policies")
		for _, w := range []string{"old                                 0            0            2            0\n",
			"(2 keys of LOCKOUT+CAL in the layout of earlier versions"} {
			if code != 0 || !strings.Contains(stdout, w) {
				t.Errorf("policies: exit %d, stdout lacks %q:\n%s%s", code, w, stdout, stderr)
			}
		}
	})

	t.Run("peek json", func(t *testing.T) {
		code, stdout, stderr := exec(t, url, "peek", "-json", "-policy", "login", "-rules", "5/15m", "app-1")
		if code != 3 || !strings.Contains(stderr, `nothing found for key "app-1"`) || !strings.HasPrefix(stdout, "{") {
			t.Errorf("peek -json of a key with nothing: exit %d, stdout %q, stderr %q; want 3, the JSON and the hint", code, stdout, stderr)
		}
		if _, err := login.Allow(ctx, "bob"); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr = exec(t, url, "peek", "-json", "-policy", "login", "-rules", "5/15m", "bob")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var got peekJSON
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("invalid JSON %q: %v", stdout, err)
		}
		want := peekJSON{Policy: "login", RedisKey: "ratekit:login:{bob}"}
		if got.Policy != want.Policy || got.RedisKey != want.RedisKey || got.Allowed == nil || !*got.Allowed ||
			len(got.Rules) != 1 || got.Rules[0].Used != 1 || got.Rules[0].Remaining != 4 {
			t.Errorf("peek -json = %+v, want %+v with 1 used, 4 remaining", got, want)
		}
	})
}

func TestConnectionErrors(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name    string
		url     string
		stop    bool
		want    string
		notWant string
	}{
		{"invalid URL never echoed", "http://:hunter2@somewhere", false, "REDIS_URL is not a valid redis:// URL", "hunter2"},
		{"Redis down", "redis://:hunter2@" + srv.Addr() + "/0", true, "redis at " + srv.Addr(), "hunter2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stop {
				srv.Stop()
			}
			code, _, stderr := exec(t, tc.url, "reset", "-timeout", "2s", "-policy", "login", "alice")
			if code != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, tc.notWant) {
				t.Errorf("exit %d, stderr %q; want 1 and %q without %q", code, stderr, tc.want, tc.notWant)
			}
		})
	}
}

func TestParseRules(t *testing.T) {
	tests := []struct {
		in      string
		want    []core.Rule
		wantErr bool
	}{
		{"5/15m", []core.Rule{{Limit: 5, Window: 15 * time.Minute}}, false},
		{"1/60s, 5/1h,10/1d", []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}, {Limit: 10, Window: 24 * time.Hour}}, false},
		{"", nil, true},
		{"5", nil, true},
		{"x/1m", nil, true},
		{"5/soon", nil, true},
		{"5/xd", nil, true},
		{"1000/day, 5000/week,1000000/month@UTC", []core.Rule{{Limit: 1000, Calendar: core.Day}, {Limit: 5000, Calendar: core.Week},
			{Limit: 1000000, Calendar: core.Month, Location: time.UTC}}, false},
		{"5/month@Nowhere", nil, true},
	}
	for _, tc := range tests {
		got, err := parseRules(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseRules(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("parseRules(%q) = %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseRules(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		key    string
		policy string
		kind   string // its column
		ok     bool
	}{
		{"ratekit:login:{alice}", "login", "SLIDINGLOG", true},
		{"ratekit:quota:{app:{1}}:b", "quota", "BUCKETS", true},
		{"ratekit:api:{app-42}:m", "api", "LOCKOUT+CAL", true},
		{"ratekit:api:{app-42}:c", "api", "LOCKOUT+CAL", true},
		{"ratekit:login-ip:{192.0.2.1}:l", "login-ip", "LOCKOUT+CAL", true},
		{"ratekit:export:{key-1}:lease", "export", "INFLIGHT", true},
		{"ratekit:login:{a}:b}", "login", "SLIDINGLOG", true}, // the key "a}:b"
		{"ratekit:a:b:{k}", "a:b", "SLIDINGLOG", true},
		{"other:login:{alice}", "", "", false},
		{"ratekit:login", "", "", false},
		{"ratekit::{x}", "", "", false},
		{"ratekit:login:{alice}:x", "", "", false},
	}
	for _, tc := range tests {
		p, kind, ok := parseKey("ratekit", tc.key)
		col := ""
		if ok {
			col = columns[keyKinds[kind].column]
		}
		if p != tc.policy || col != tc.kind || ok != tc.ok {
			t.Errorf("parseKey(%q) = %q, %s, %v; want %q, %s, %v", tc.key, p, col, ok, tc.policy, tc.kind, tc.ok)
		}
	}
}
