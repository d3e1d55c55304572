package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/opshttp"
)

const usage = `usage: ratekit <command> [flags] [key ...]

commands:
  peek -policy NAME -rules LIMIT/WINDOW[,LIMIT/WINDOW...] [-algorithm log|buckets] [-buckets N] [-json] KEY
        what a request of one unit for KEY would get now; records nothing
  reset -policy NAME KEY...
        forget everything recorded for each KEY (both algorithms)
  policies [-max N]
        policy names found in Redis, with their number of keys

Every command takes -prefix (default "ratekit") and -timeout (default 5s).
Windows are Go durations or days: 1/60s, 5/1h, 10/1d.
Redis is REDIS_URL (default redis://127.0.0.1:6379/0).
`

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage marks a command-line mistake; the message is printed with the
// usage.
var errUsage = errors.New("usage")

// run executes one command; it returns the process exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "peek":
		err = peek(ctx, args, getenv, stdout, stderr)
	case "reset":
		err = reset(ctx, args, getenv, stdout, stderr)
	case "policies":
		err = policies(ctx, args, getenv, stdout, stderr)
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "ratekit %s: %s\n\n%s", cmd, strings.TrimPrefix(err.Error(), "usage: "), usage)
		return exitUsage
	}
	fmt.Fprintf(stderr, "ratekit %s: %v\n", cmd, err)
	return exitError
}

// common holds the flags every command takes.
type common struct {
	prefix  string
	timeout time.Duration
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{}
	fs.StringVar(&c.prefix, "prefix", "ratekit", "key prefix of the app's RedisStore (core.WithPrefix)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound of the whole command")
	return fs, c
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// connect opens REDIS_URL. Errors never show the URL: it may hold a
// password.
// open connects to REDIS_URL and bounds the command by -timeout; done
// releases both.
func (c *common) open(ctx context.Context, getenv func(string) string) (*redis.Client, context.Context, func(), error) {
	rdb, err := connect(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return rdb, ctx, func() { cancel(); _ = rdb.Close() }, nil
}

func connect(getenv func(string) string) (*redis.Client, error) {
	url := getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	return redis.NewClient(opt), nil
}

func peek(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags("peek", stderr)
	policy := fs.String("policy", "", "policy name (required)")
	rules := fs.String("rules", "", "the policy's rules, LIMIT/WINDOW separated by commas (required)")
	algo := fs.String("algorithm", "log", "the policy's algorithm: log (SlidingLog) or buckets (SlidingBuckets)")
	buckets := fs.Int("buckets", 0, "the policy's Buckets under SlidingBuckets (0: the default)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: peek takes exactly one key", errUsage)
	}
	p := core.Policy{Name: *policy, Buckets: *buckets}
	var err error
	if p.Rules, err = parseRules(*rules); err != nil {
		return err
	}
	switch *algo {
	case "log":
		p.Algorithm = core.SlidingLog
	case "buckets":
		p.Algorithm = core.SlidingBuckets
	default:
		return fmt.Errorf("%w: -algorithm %q: want log or buckets", errUsage, *algo)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	rdb, ctx, done, err := c.open(ctx, getenv)
	if err != nil {
		return err
	}
	defer done()
	store := core.NewRedisStore(rdb, core.WithPrefix(c.prefix))
	l, failed, err := limiter(store, p)
	if err != nil {
		return err
	}
	d, err := l.Peek(ctx, fs.Arg(0))
	if err == nil && *failed != nil {
		err = *failed
	}
	if err != nil {
		return fmt.Errorf("redis at %s: %w", rdb.Options().Addr, err)
	}
	res := core.Result{Allowed: d.Allowed, Rules: d.Rules()}
	redisKey := store.Key(p.Name, fs.Arg(0))
	if p.Algorithm == core.SlidingBuckets {
		redisKey += ":b"
	}
	if *asJSON {
		return printJSON(stdout, p, redisKey, res)
	}
	fmt.Fprintf(stdout, "policy %s, key %q (Redis key %s)\n", p.Name, fs.Arg(0), redisKey)
	if res.Allowed {
		fmt.Fprintln(stdout, "a request now: allowed")
	} else {
		var wait time.Duration
		for _, s := range res.Rules {
			wait = max(wait, s.RetryAfter)
		}
		fmt.Fprintf(stdout, "a request now: denied, retry after %s\n", round(wait))
	}
	for _, s := range res.Rules {
		fmt.Fprintf(stdout, "  rule %d/%s: used %d, remaining %d", s.Limit, s.Window, s.Used, s.Remaining())
		if s.RetryAfter > 0 {
			fmt.Fprintf(stdout, ", full: retry after %s", round(s.RetryAfter))
		}
		if s.ResetAfter > 0 {
			fmt.Fprintf(stdout, ", empty in %s", round(s.ResetAfter))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// limiter returns a limiter for p on store that never decides by itself:
// a store failure is recorded in *failed instead of falling back.
func limiter(store core.Store, p core.Policy) (l *core.Limiter, failed *error, err error) {
	failed = new(error)
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventStoreError && *failed == nil {
			*failed = e.Err
		}
	})
	l, err = core.NewLimiter(store, p, core.WithTimeout(time.Hour), core.WithFailurePolicy(core.FailClosed),
		core.WithBreaker(0, 0), core.WithDenyCache(0), core.WithObserver(obs))
	return l, failed, err
}

// peekJSON is peek's -json output.
type peekJSON struct {
	Policy   string              `json:"policy"`
	RedisKey string              `json:"redis_key"`
	Allowed  bool                `json:"allowed"`
	Rules    []opshttp.RuleState `json:"rules"`
}

func printJSON(w io.Writer, p core.Policy, redisKey string, res core.Result) error {
	out := peekJSON{Policy: p.Name, RedisKey: redisKey, Allowed: res.Allowed}
	for _, s := range res.Rules {
		out.Rules = append(out.Rules, opshttp.NewRuleState(s))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

func reset(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags("reset", stderr)
	policy := fs.String("policy", "", "policy name (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *policy == "" {
		return fmt.Errorf("%w: -policy is required", errUsage)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: reset takes one or more keys", errUsage)
	}
	rdb, ctx, done, err := c.open(ctx, getenv)
	if err != nil {
		return err
	}
	defer done()
	store := core.NewRedisStore(rdb, core.WithPrefix(c.prefix))
	// Reset does not depend on the rules; any valid rule names the policy.
	l, _, err := limiter(store, core.Policy{Name: *policy, Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	for _, k := range fs.Args() {
		if err := l.Reset(ctx, k); err != nil {
			return fmt.Errorf("redis at %s: %w", rdb.Options().Addr, err)
		}
		fmt.Fprintf(stdout, "reset %s %q\n", *policy, k)
	}
	return nil
}

func policies(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags("policies", stderr)
	maxKeys := fs.Int("max", 100000, "stop scanning after this many keys")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: policies takes no arguments", errUsage)
	}
	rdb, ctx, done, err := c.open(ctx, getenv)
	if err != nil {
		return err
	}
	defer done()
	type counts struct{ log, buckets int }
	found := map[string]*counts{}
	scanned := 0
	iter := rdb.Scan(ctx, 0, escapeGlob(c.prefix)+":*", 1000).Iterator()
	for scanned < *maxKeys && iter.Next(ctx) {
		scanned++
		name, buckets, ok := parseKey(c.prefix, iter.Val())
		if !ok {
			continue
		}
		n := found[name]
		if n == nil {
			n = &counts{}
			found[name] = n
		}
		if buckets {
			n.buckets++
		} else {
			n.log++
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", rdb.Options().Addr, err)
	}
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "%-24s %12s %12s\n", "POLICY", "SLIDINGLOG", "BUCKETS")
	for _, name := range names {
		fmt.Fprintf(stdout, "%-24s %12d %12d\n", name, found[name].log, found[name].buckets)
	}
	if scanned >= *maxKeys {
		fmt.Fprintf(stdout, "(stopped after %d keys: counts are partial; raise -max)\n", scanned)
	}
	return nil
}

// parseKey splits a RedisStore key, <prefix>:<policy>:{<key>} with ":b"
// appended under SlidingBuckets.
func parseKey(prefix, k string) (policy string, buckets, ok bool) {
	rest, ok := strings.CutPrefix(k, prefix+":")
	if !ok {
		return "", false, false
	}
	if rest, buckets = strings.CutSuffix(rest, ":b"); !strings.HasSuffix(rest, "}") {
		return "", false, false
	}
	i := strings.Index(rest, ":{")
	if i <= 0 {
		return "", false, false
	}
	return rest[:i], buckets, true
}

// escapeGlob escapes the glob characters of SCAN MATCH.
func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// parseRules parses "5/15m,20/24h"; a window may also be whole days
// ("10/1d").
func parseRules(s string) ([]core.Rule, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: -rules is required (for example -rules 5/15m)", errUsage)
	}
	var rules []core.Rule
	for _, f := range strings.Split(s, ",") {
		lim, win, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok {
			return nil, fmt.Errorf("%w: rule %q: want LIMIT/WINDOW", errUsage, f)
		}
		n, err := strconv.ParseInt(lim, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q: limit %q is not a number", errUsage, f, lim)
		}
		var w time.Duration
		if days, isDays := strings.CutSuffix(win, "d"); isDays {
			d, err := strconv.Atoi(days)
			if err != nil {
				return nil, fmt.Errorf("%w: rule %q: window %q", errUsage, f, win)
			}
			w = time.Duration(d) * 24 * time.Hour
		} else if w, err = time.ParseDuration(win); err != nil {
			return nil, fmt.Errorf("%w: rule %q: window %q is not a duration", errUsage, f, win)
		}
		rules = append(rules, core.Rule{Limit: n, Window: w})
	}
	return rules, nil
}
