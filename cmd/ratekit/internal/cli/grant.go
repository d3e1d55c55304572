package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/opshttp"
	"github.com/ratekit/ratekit/redisstore"
)

// grantUsage is the usage text of grant and revoke.
const grantUsage = `  grant -policy NAME (-extra N | -exempt) (-for DURATION | -until TIME)
        [-by WHO] [-note TEXT] [-algorithm log|buckets] [key flags] KEY...
        give each KEY N more units on every rule of the policy, or exempt it,
        on every instance at once, until it ends by itself: -for a Go
        duration (24h) or -until a time in RFC 3339, at most 30 days away.
        -by defaults to $USER. Under the sliding log (-algorithm log, the
        default) -extra is at most 99,999: the log keeps a unit per request. Refused while an instance of a release that
        reads no grants uses the policy. The command does not know the app's
        Allow and Deny lists: the app refuses grants to the keys they decide,
        and ignores one given here.
  revoke -policy NAME [key flags] KEY...
        end each KEY's grant now
`

// grantFlags are the flags of grant and revoke.
type grantFlags struct {
	policy, forDur, until, by, note, algo string
	extra                                 int64
	exempt                                bool
}

func grant(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return grantOrRevoke(ctx, "grant", args, getenv, stdout, stderr)
}

func revoke(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return grantOrRevoke(ctx, "revoke", args, getenv, stdout, stderr)
}

// grantOrRevoke runs grant or revoke (cmd).
func grantOrRevoke(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags(cmd, stderr)
	var f grantFlags
	fs.StringVar(&f.policy, "policy", "", "policy name (required)")
	if cmd == "grant" {
		fs.Int64Var(&f.extra, "extra", 0, "units added to every rule's limit")
		fs.BoolVar(&f.exempt, "exempt", false, "admit every request of the key, uncounted")
		fs.StringVar(&f.forDur, "for", "", "how long the grant lasts: a Go duration, such as 1h or 24h")
		fs.StringVar(&f.until, "until", "", "when the grant ends, in RFC 3339")
		fs.StringVar(&f.note, "note", "", "why, for the audit line and whoever looks the key up")
		fs.StringVar(&f.algo, "algorithm", "log", "the policy's algorithm, which bounds -extra: log (SlidingLog) or buckets (SlidingBuckets)")
	}
	fs.StringVar(&f.by, "by", getenv("USER"), "who grants it")
	kf := addKeyFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	g, err := f.grant(cmd, fs.NArg(), time.Now())
	if err != nil {
		return err
	}
	kind, targets, err := kf.targets(fs.Args(), getenv, stderr, c.cmd)
	if err != nil {
		return err
	}
	cn, ctx, done, err := c.open(ctx, getenv, stderr, true)
	if err != nil {
		return err
	}
	defer done()
	// The rules do not matter to a grant but for the bound of Extra
	// under SlidingLog, which the smallest rule gives.
	p, err := peekPolicy(f.policy, "1/1s", f.algo, 0, 0)
	if err != nil {
		return err
	}
	l, _, err := limiter(redisstore.New(cn.rdb, redisstore.WithPrefix(c.prefix)), p)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	for _, t := range targets {
		if err := l.Grant(ctx, t.key, g); errors.Is(err, core.ErrInvalidPolicy) {
			return fmt.Errorf("%w: %s: %w", errUsage, t.describe(kind), err) // the flags' terms
		} else if err != nil {
			return fmt.Errorf("%s: %w", t.describe(kind), err)
		}
		fmt.Fprintf(stdout, "%s %s %s: %s\n", cmd, p.Name, t.describe(kind), describeGrant(g))
	}
	return nil
}

// grant returns the grant the flags ask for at now (a revocation for
// revoke), or a usage error; n is the number of keys.
func (f *grantFlags) grant(cmd string, n int, now time.Time) (core.Grant, error) {
	g := core.Grant{Extra: f.extra, Exempt: f.exempt, By: f.by, Note: f.note}
	switch {
	case f.policy == "":
		return g, fmt.Errorf("%w: -policy is required", errUsage)
	case n == 0:
		return g, fmt.Errorf("%w: %s takes one or more keys", errUsage, cmd)
	case cmd == "revoke":
		return core.Grant{By: f.by}, nil
	case f.exempt == (f.extra != 0):
		return g, fmt.Errorf("%w: give -extra N or -exempt", errUsage)
	case (f.forDur == "") == (f.until == ""):
		return g, fmt.Errorf("%w: give -for or -until", errUsage)
	case f.forDur != "":
		d, err := time.ParseDuration(f.forDur)
		if err != nil || d <= 0 {
			return g, fmt.Errorf("%w: -for %q: want a positive duration, such as 1h or 24h", errUsage, f.forDur)
		}
		g.Until = now.Add(d)
	default:
		t, err := time.Parse(time.RFC3339, f.until)
		if err != nil || !t.After(now) {
			return g, fmt.Errorf("%w: -until %q: want a time to come, in RFC 3339", errUsage, f.until)
		}
		g.Until = t
	}
	return g, nil
}

// describeGrant says what g gives, or that it revokes.
func describeGrant(g core.Grant) string {
	if g.Until.IsZero() {
		return "grant revoked"
	}
	var b strings.Builder
	if g.Exempt {
		b.WriteString("exempt")
	} else {
		fmt.Fprintf(&b, "%d more units on every rule", g.Extra)
	}
	fmt.Fprintf(&b, " until %s", g.Until.UTC().Truncate(time.Second).Format(time.RFC3339))
	if g.By != "" {
		fmt.Fprintf(&b, ", by %s", g.By)
	}
	if g.Note != "" {
		fmt.Fprintf(&b, ": %s", g.Note)
	}
	return b.String()
}

// peekGrant returns the live grant of key (not bounded) under p, for
// peek; nil when it holds none, or p has Shards (which take no grants).
func peekGrant(ctx context.Context, store *redisstore.Store, p core.Policy, key string) (*core.Grant, error) {
	if p.Shards > 1 {
		return nil, nil
	}
	g, ok, err := store.GrantOf(ctx, p.Name, driver.BoundKey(key))
	if err != nil || !ok {
		return nil, err
	}
	return &core.Grant{Extra: g.Extra, Exempt: g.Exempt, Until: g.Until, By: g.By, Note: g.Note}, nil
}

// grantJSON is the grant in peek's -json output.
func grantJSON(g *core.Grant) *opshttp.GrantState {
	if g == nil {
		return nil
	}
	return &opshttp.GrantState{Extra: g.Extra, Exempt: g.Exempt, Until: g.Until.UTC().Format(time.RFC3339), By: g.By, Note: g.Note}
}
