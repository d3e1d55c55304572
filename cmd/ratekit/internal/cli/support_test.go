package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/redisstore"
)

// TestMain silences go-redis as the command's main does
// (cmd/ratekit's tests check the whole process).
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	os.Exit(m.Run())
}

// execEnv runs the CLI with the environment env.
func execEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// appOptions are the options of an app's limiters. They keep no deny
// cache: a reset by another process reaches the app's deny caches by a
// way of core's own, not tested here. Their timeout is generous, so that
// a loaded machine does not turn the decisions into local fallbacks.
var appOptions = []core.Option{core.WithDenyCache(0), core.WithTimeout(2 * time.Second)}

// lockOut spends every unit of key under l.
func lockOut(t *testing.T, l *core.Limiter, key string) {
	t.Helper()
	for {
		d, err := l.Allow(context.Background(), key)
		if err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow(%q) = %+v, %v", key, d, err)
		}
		if !d.Allowed {
			return
		}
	}
}

func want(t *testing.T, args []string, code, wantCode int, out string, wants ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("ratekit %q: exit %d, want %d; output:\n%s", args, code, wantCode, out)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("ratekit %q: output lacks %q:\n%s", args, w, out)
		}
	}
}

// TestIdentifiers is support unlocking a user whose limits are keyed by
// pseudonyms (package keyfunc/personal): they have the account name or
// the phone number, Redis has an HMAC of it under the app's secret.
func TestIdentifiers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := redisstore.New(rdb)
	rule := []core.Rule{{Limit: 2, Window: time.Hour}}
	logins := testkit.Limiter(t, store, core.Policy{Name: "login-account", Rules: rule}, appOptions...)
	sms := testkit.Limiter(t, store, core.Policy{Name: "sms", Rules: rule}, appOptions...)
	cleartext := testkit.Limiter(t, store, core.Policy{Name: "login-clear", Rules: rule}, appOptions...)

	secret := []byte("app secret \x00\xff")
	alice, err := personal.AccountKey("alice@example.com", personal.Secret(secret))
	if err != nil {
		t.Fatal(err)
	}
	phone, err := personal.PhoneKey("+8613800138000", personal.Secret(secret), personal.DefaultRegion("CN"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0", "RATEKIT_KEY_SECRET": hex.EncodeToString(secret)}

	t.Run("peek an account", func(t *testing.T) {
		lockOut(t, logins, alice)
		args := []string{"peek", "-policy", "login-account", "-rules", "2/1h", "-account", "-secret-encoding", "hex", " Alice@Example.COM "}
		code, stdout, stderr := execEnv(t, env, args...)
		want(t, args, code, 0, stdout+stderr,
			`policy login-account, account " Alice@Example.COM " (stored key "`+alice+`", Redis key ratekit:login-account:{`+alice+`})`,
			"a request now: denied", "used 2, remaining 0")

		args = append([]string{"peek", "-json"}, args[1:]...)
		code, stdout, stderr = execEnv(t, env, args...)
		var got peekJSON
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil {
			t.Fatalf("ratekit %q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		if got.Key != alice || got.RedisKey != "ratekit:login-account:{"+alice+"}" || got.Allowed == nil || *got.Allowed {
			t.Errorf("peek -json = %+v, want key %q, denied", got, alice)
		}
	})

	t.Run("reset an account", func(t *testing.T) {
		lockOut(t, logins, alice)
		args := []string{"reset", "-policy", "login-account", "-account", "-secret-encoding", "hex", "alice@EXAMPLE.com"}
		code, stdout, stderr := execEnv(t, env, args...)
		want(t, args, code, 0, stdout+stderr, `reset login-account account "alice@EXAMPLE.com" (stored key "`+alice+`"): deleted 1 Redis key`)
		if d, err := logins.Allow(context.Background(), alice); err != nil || !d.Allowed {
			t.Errorf("after reset, the app's Allow = %+v, %v; want admitted", d, err)
		}
	})

	// Support with the wrong secret, or none, derives a key the app never
	// used: reset finds nothing, and says so with a non-zero exit and a
	// hint at the secret, rather than "nothing deleted" and success.
	t.Run("reset with the wrong secret", func(t *testing.T) {
		lockOut(t, logins, alice)
		for _, tc := range []struct {
			env  map[string]string
			hint string
		}{
			{map[string]string{"REDIS_URL": env["REDIS_URL"], "RATEKIT_KEY_SECRET": "not the app's"}, "is RATEKIT_KEY_SECRET the app's secret"},
			{map[string]string{"REDIS_URL": env["REDIS_URL"]}, "RATEKIT_KEY_SECRET is not set"},
		} {
			args := []string{"reset", "-policy", "login-account", "-account", "alice@example.com"}
			code, stdout, stderr := execEnv(t, tc.env, args...)
			want(t, args, code, 3, stdout, "not found, nothing deleted")
			want(t, args, code, 3, stderr, `ratekit reset: nothing found for account "alice@example.com" (stored key "`, tc.hint)
			args = []string{"peek", "-policy", "login-account", "-account", "alice@example.com"}
			code, stdout, stderr = execEnv(t, tc.env, args...)
			want(t, args, code, 3, stdout+stderr, "Redis holds nothing for it", `ratekit peek: nothing found for account "alice@example.com"`, tc.hint)
		}
		if d, _ := logins.Peek(context.Background(), alice); d.Allowed {
			t.Errorf("a reset with the wrong secret reset alice")
		}
	})

	t.Run("reset a phone", func(t *testing.T) {
		lockOut(t, sms, phone)
		args := []string{"reset", "-policy", "sms", "-phone", "-region", "cn", "-secret-encoding", "hex", "138 0013 8000"}
		code, stdout, stderr := execEnv(t, env, args...)
		want(t, args, code, 0, stdout+stderr, `(stored key "`+phone+`"): deleted 1 Redis key`)
		if d, err := sms.Allow(context.Background(), phone); err != nil || !d.Allowed {
			t.Errorf("after reset, the app's Allow = %+v, %v; want admitted", d, err)
		}
	})

	t.Run("base64 secret", func(t *testing.T) {
		b64 := map[string]string{"REDIS_URL": env["REDIS_URL"], "RATEKIT_KEY_SECRET": base64.StdEncoding.EncodeToString(secret)}
		args := []string{"peek", "-policy", "login-account", "-rules", "2/1h", "-account", "-secret-encoding", "base64", "alice@example.com"}
		code, stdout, stderr := execEnv(t, b64, args...)
		want(t, args, code, 0, stdout+stderr, `(stored key "`+alice+`"`)
	})

	t.Run("raw secret", func(t *testing.T) {
		raw := map[string]string{"REDIS_URL": env["REDIS_URL"], "RATEKIT_KEY_SECRET": "plain secret"}
		key, _ := personal.AccountKey("bob", personal.Secret([]byte("plain secret")))
		args := []string{"peek", "-policy", "login-account", "-rules", "2/1h", "-account", "bob"}
		code, stdout, stderr := execEnv(t, raw, args...)
		want(t, args, code, 3, stdout+stderr, `(stored key "`+key+`"`) // bob has made no attempt
	})

	t.Run("cleartext", func(t *testing.T) {
		lockOut(t, cleartext, "alice@example.com")
		args := []string{"reset", "-policy", "login-clear", "-account", "-cleartext", "ALICE@example.com"}
		code, stdout, stderr := execEnv(t, map[string]string{"REDIS_URL": env["REDIS_URL"]}, args...)
		want(t, args, code, 0, stdout, `(stored key "alice@example.com"): deleted 1 Redis key`)
		if strings.Contains(stderr, "RATEKIT_KEY_SECRET") {
			t.Errorf("-cleartext warns about the secret: %s", stderr)
		}
	})

	t.Run("no secret", func(t *testing.T) {
		key, _ := personal.AccountKey("bob")
		args := []string{"peek", "-policy", "login-account", "-rules", "2/1h", "-account", "bob"}
		code, stdout, stderr := execEnv(t, map[string]string{"REDIS_URL": env["REDIS_URL"]}, args...)
		want(t, args, code, 3, stdout+stderr, `(stored key "`+key+`"`, "RATEKIT_KEY_SECRET is not set") // bob has made no attempt
	})

	t.Run("mistakes", func(t *testing.T) {
		lockOut(t, logins, alice)
		for _, tc := range []struct {
			args   []string
			want   string
			secret string // RATEKIT_KEY_SECRET if set
		}{
			// Every identifier is checked before anything is reset.
			{[]string{"reset", "-policy", "sms", "-phone", "-region", "CN", "13800138000", "12345"}, `phone "12345": invalid phone number`, ""},
			{[]string{"reset", "-policy", "login-account", "-account", "alice@example.com", strings.Repeat("a", 400)}, "invalid account name", ""},
			{[]string{"peek", "-policy", "sms", "-rules", "2/1h", "-phone", "+86 138"}, "invalid phone number", ""},
			{[]string{"reset", "-policy", "sms", "-region", "CN", "x"}, "-region needs -phone", ""},
			{[]string{"reset", "-policy", "sms", "-cleartext", "x"}, "-cleartext needs -account or -phone", ""},
			{[]string{"reset", "-policy", "sms", "-account", "-phone", "x"}, "-account and -phone exclude each other", ""},
			{[]string{"reset", "-policy", "sms", "-phone", "-region", "XX", "x"}, `unknown region "XX"`, ""},
			{[]string{"reset", "-policy", "sms", "-phone", "-secret-encoding", "rot13", "x"}, "-secret-encoding", ""},
			{[]string{"reset", "-policy", "sms", "-phone", "-secret-encoding", "hex", "x"}, "RATEKIT_KEY_SECRET is not valid hex", "zz"},
			{[]string{"reset", "-policy", "sms", "-phone", "-secret-encoding", "base64", "x"}, "RATEKIT_KEY_SECRET is not valid base64", "a*b"},
		} {
			env := env
			if tc.secret != "" {
				env = map[string]string{"REDIS_URL": env["REDIS_URL"], "RATEKIT_KEY_SECRET": tc.secret}
			}
			code, stdout, stderr := execEnv(t, env, tc.args...)
			want(t, tc.args, code, 2, stderr, tc.want)
			if stdout != "" {
				t.Errorf("ratekit %q wrote %q", tc.args, stdout)
			}
		}
		if d, _ := logins.Peek(context.Background(), alice); d.Allowed {
			t.Errorf("a refused reset reset alice")
		}
	})
}

// TestFlagsAfterKeys: flags may follow the keys.
func TestFlagsAfterKeys(t *testing.T) {
	srv := redistest.Start(t)
	store := redisstore.New(srv.Client(t))
	login := testkit.Limiter(t, store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}}, appOptions...)
	lockOut(t, login, "alice")
	lockOut(t, login, "-dash")
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0"}
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"peek", "alice", "-policy", "login", "-rules", "2/1h"}, []string{`key "alice"`, "denied"}},
		{[]string{"peek", "-policy", "login", "alice", "-rules=2/1h", "-json"}, []string{`"allowed": false`}},
		{[]string{"reset", "alice", "-policy", "login", "bob"}, []string{`reset login "alice": deleted 1 Redis key`, `reset login "bob": not found`}},
		{[]string{"reset", "-policy", "login", "--", "-dash"}, []string{`reset login "-dash": deleted 1 Redis key`}},
	} {
		code, stdout, stderr := execEnv(t, env, tc.args...)
		wantCode := 0
		if strings.Contains(stdout, "not found") {
			wantCode = 3
		}
		want(t, tc.args, code, wantCode, stdout+stderr, tc.wants...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", "alice", "-policy"}, "flag needs an argument: -policy"},
		{[]string{"reset", "alice", "-policy", "login", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"reset", "-policy", "login"}, "reset takes one or more keys"},
	} {
		code, _, stderr := execEnv(t, env, tc.args...)
		want(t, tc.args, code, 2, stderr, tc.want)
	}
}

// TestResetCounts: reset says how many Redis keys it deleted, per key,
// shards included.
func TestResetCounts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := redisstore.New(rdb)
	ctx := context.Background()
	login := testkit.Limiter(t, store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}}, appOptions...)
	quota := testkit.Limiter(t, store, core.Policy{Name: "quota", Rules: []core.Rule{{Limit: 1000, Window: time.Hour}}, Algorithm: core.SlidingBuckets}, appOptions...)
	capped := testkit.Limiter(t, store, core.Policy{Name: "global", Rules: []core.Rule{{Limit: 8, Window: time.Hour}}, Shards: 4}, appOptions...)
	exports := testkit.Limiter(t, store, core.Policy{Name: "export", InFlight: 2}, appOptions...)
	lockOut(t, login, "alice")
	if d, err := exports.Allow(ctx, "app-1"); err != nil || !d.Allowed {
		t.Fatalf("export Allow = %+v, %v", d, err)
	}
	if _, err := quota.AllowN(ctx, "app-1", 5); err != nil {
		t.Fatal(err)
	}
	for range 3 { // shards 0, 1 and 2
		if _, err := capped.Allow(ctx, "all"); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0"}
	for _, tc := range []struct {
		args   []string
		stdout []string
		stderr []string
	}{
		{[]string{"peek", "-policy", "global", "-rules", "8/1h", "-shards", "4", "all"},
			[]string{"(Redis key ratekit:global:{all#0})", "shard 0 of 4", "rule 2/1h0m0s: used 1, remaining 1"}, nil},
		{[]string{"reset", "-policy", "login", "alice", "nobody"},
			[]string{`reset login "alice": deleted 1 Redis key`, `reset login "nobody": not found, nothing deleted`},
			[]string{"nothing found for 1 of the 2 keys", "hint: "}},
		{[]string{"reset", "-policy", "login", "alice"}, []string{`reset login "alice": not found, nothing deleted`}, []string{"hint: "}},
		{[]string{"reset", "-policy", "quota", "app-1"}, []string{`reset quota "app-1": deleted 1 Redis key`}, nil},
		// An InFlight policy's leases are one Redis key too.
		{[]string{"reset", "-policy", "export", "app-1"}, []string{`reset export "app-1": deleted 1 Redis key`}, nil},
		// Without -shards the sharded keys are not the key's: say so.
		{[]string{"reset", "-policy", "global", "all"}, []string{`reset global "all": not found, nothing deleted`},
			[]string{"ratekit:global:{all#0} exists", "-shards"}},
		{[]string{"reset", "-policy", "global", "-shards", "4", "all"}, []string{`reset global "all": deleted 3 Redis keys`}, nil},
	} {
		code, stdout, stderr := execEnv(t, env, tc.args...)
		wantCode := 0
		if strings.Contains(stdout, "not found") {
			wantCode = 3 // and a hint on stderr
		}
		want(t, tc.args, code, wantCode, stdout, tc.stdout...)
		want(t, tc.args, code, wantCode, stderr, tc.stderr...)
	}
	// Only the policies' counts of instances are left.
	if keys, _ := rdb.Keys(ctx, "*").Result(); slices.ContainsFunc(keys, func(k string) bool { return !strings.HasSuffix(k, ":fleet") }) {
		t.Errorf("after the resets Redis holds %d keys: %q", len(keys), keys)
	}
	if d, err := capped.Allow(ctx, "all"); err != nil || !d.Allowed {
		t.Errorf("after reset -shards, Allow = %+v, %v", d, err)
	}
}

// TestRedisURL: reset needs REDIS_URL; every command says where it
// connects, without the password.
func TestRedisURL(t *testing.T) {
	code, stdout, stderr := execEnv(t, map[string]string{}, "reset", "-policy", "login", "alice")
	if code == 0 || !strings.Contains(stderr, "REDIS_URL is not set") || stdout != "" {
		t.Errorf("reset without REDIS_URL: exit %d, stdout %q, stderr %q; want an error naming REDIS_URL", code, stdout, stderr)
	}

	srv := redistest.Start(t)
	url := "redis://:hunter2@" + srv.Addr() + "/0"
	for _, args := range [][]string{
		{"reset", "-policy", "login", "alice"},
		{"peek", "-policy", "login", "-rules", "1/1m", "alice"},
		{"policies"},
	} {
		_, _, stderr := execEnv(t, map[string]string{"REDIS_URL": url}, args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if want := "ratekit " + args[0] + ": connecting to redis://:xxxxx@" + srv.Addr() + "/0 (REDIS_URL)"; first != want {
			t.Errorf("ratekit %q: first line of stderr %q, want %q", args, first, want)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("ratekit %q: stderr shows the password: %s", args, stderr)
		}
	}
}

// TestShowURL: where a command connects is shown without the password,
// naming the database when the URL does not; a default or a missing
// database is a doubt that a lookup finding nothing mentions.
func TestShowURL(t *testing.T) {
	for _, tc := range []struct{ env, want, doubt string }{
		{"", "redis://127.0.0.1:6379/0 (REDIS_URL is not set: the default)", "REDIS_URL is not set, so this looked in the default"},
		{"redis://:pw@h:1/2", "redis://:xxxxx@h:1/2 (REDIS_URL)", ""},
		{"redis://user:pw@h:1/2?dial_timeout=3", "redis://user:xxxxx@h:1/2?dial_timeout=3 (REDIS_URL)", ""},
		{"rediss://h", "rediss://h (REDIS_URL; it names no database: database 0)", "REDIS_URL names no database, so this looked in database 0"},
		{"redis://h:6379/", "redis://h:6379/ (REDIS_URL; it names no database: database 0)", "names no database"},
		{"unix://:pw@/run/redis.sock", "unix://:xxxxx@/run/redis.sock (REDIS_URL; it names no database: database 0)", "names no database"},
		{"unix:///run/redis.sock?db=3", "unix:///run/redis.sock?db=3 (REDIS_URL)", ""},
	} {
		raw, shown, doubt, err := redisURL(func(string) string { return tc.env }, false)
		if err != nil || shown != tc.want || (tc.env != "" && raw != tc.env) || !strings.Contains(doubt, tc.doubt) || (tc.doubt == "") != (doubt == "") {
			t.Errorf("redisURL(%q) = %q, %q, %q, %v; want %q and a doubt holding %q", tc.env, raw, shown, doubt, err, tc.want, tc.doubt)
		}
	}
}

// A lookup that finds nothing in a database the URL did not name says
// so in its hint.
func TestNotFoundWithoutDatabase(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"peek", "-policy", "login", "alice"}
	code, _, stderr := execEnv(t, map[string]string{"REDIS_URL": "redis://" + srv.Addr()}, args...)
	want(t, args, code, 3, stderr, "connecting to redis://"+srv.Addr()+" (REDIS_URL; it names no database: database 0)",
		"hint: REDIS_URL names no database, so this looked in database 0: add the app's, as in redis://host:6379/1; is it the key")
}

// TestRefused: a refused connection is reported as such, whatever the
// timeout.
func TestRefused(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	url := "redis://" + addr + "/0"
	for _, args := range [][]string{
		{"reset", "-timeout", "150ms", "-policy", "login", "alice"},
		{"peek", "-timeout", "150ms", "-policy", "login", "-rules", "1/1m", "alice"},
		{"policies", "-timeout", "150ms"},
		{"reset", "-policy", "login", "alice"},
	} {
		code, _, stderr := execEnv(t, map[string]string{"REDIS_URL": url}, args...)
		if code != 1 || !strings.Contains(stderr, "connection refused") || !strings.Contains(stderr, addr) ||
			strings.Contains(stderr, "deadline exceeded") {
			t.Errorf("ratekit %q: exit %d, stderr %q; want 1 and connection refused at %s", args, code, stderr, addr)
		}
	}

}
