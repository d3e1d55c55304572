// Package cli is the ratekit command (see cmd/ratekit for its
// documentation) as a function, so that tests anywhere in the module can
// run it in-process, as support staff would run the command.
package cli

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nyaruka/phonenumbers"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/opshttp"
	"github.com/ratekit/ratekit/redisstore"
)

const usage = `usage: ratekit <command> [flags] [key ...]

commands:
  peek -policy NAME [-rules LIMIT/WINDOW[,LIMIT/WINDOW...]] [-algorithm log|buckets]
       [-buckets N] [-shards N] [-json] [key flags] KEY
        what Redis holds for KEY, read by itself: the units admitted and when,
        the counts of calendar periods, a lockout and its end, a passed
        challenge and its end, the requests in flight; and what a request of
        one unit would get now. Redis holds what was admitted, not the
        policy's limits: a lockout says "denied" by itself, and -rules (the
        policy's) says whether a request fits them and what remains (-rules
        has no Challenge: a request it says fits may be challenged). Records
        nothing. When Redis holds nothing for KEY, exit 3 with a hint.
  reset -policy NAME [-shards N] [key flags] KEY...
        forget everything recorded for each KEY (both algorithms, its lockout,
        calendar counts and passed challenge), and say how many Redis keys
        were deleted; when nothing was found for a KEY, exit 3 with a hint
        (a wrong policy, prefix or key; for -account and -phone, a
        RATEKIT_KEY_SECRET that is not the app's); a grant stays
` + grantUsage + `  policies [-max N]
        policy names found in Redis, with their number of Redis keys of each
        kind: sliding log, buckets, lockouts and calendar counts (one hash
        per key; earlier versions' separate keys are counted there too, and
        said), in-flight leases
  functions [-prune]
        the function libraries of ratekit loaded in Redis (one per release,
        about 100 KB each), and whether a live instance runs each (as its
        announcements say; a v0.1.0 instance announces itself when it uses
        the default failure policy); -prune deletes those none runs. The
        first instance of a release prunes by itself (docs/upgrading.md)

KEY is the key as the app's key function returned it, unless a key flag
says it is an identifier from which to derive it, as package
keyfunc/personal does:
  -account            KEY is an account name (personal.Account, personal.AccountKey)
  -phone              KEY is a phone number (personal.Phone, personal.PhoneKey)
  -region CC          with -phone: the app's personal.DefaultRegion, such as CN
  -cleartext          the app stores the normalised value (personal.Cleartext(true))
Otherwise the stored key is the value's pseudonym under the app's secret,
read from RATEKIT_KEY_SECRET (not a flag, to keep it out of shell
history): its bytes as given to personal.Secret, or hex or base64 with
-secret-encoding. Unset, personal's default (public) secret is used, as in
an app that sets no personal.Secret.

-shards N is the policy's Shards: its keys are N Redis keys each.
Every command takes -prefix (default "ratekit") and -timeout (default 5s).
Flags may come before or after keys; keys after "--" are keys even if
they start with '-'. Windows are Go durations or days: 1/60s, 5/1h, 10/1d;
or a calendar period, day, week or month, in UTC or @ a time zone:
1000000/month@Europe/Paris.

Redis is REDIS_URL (redis://[[user]:password@]host:port/db). reset, grant
and revoke need it; peek and policies default to redis://127.0.0.1:6379/0.
Each command first says on stderr where it connects, without the password.
REDIS_URL may name any node of a Redis Cluster: the commands then work on
the whole Cluster (more seed nodes as &addr=host:port). For Redis
Sentinel, name a sentinel and the master:
redis://sentinel:26379?master_name=NAME (as go-redis's ParseFailoverURL
reads it: the URL's credentials are the sentinels', &password= the
master's; more sentinels as &addr=); master_name may be left out when the
sentinel monitors one master only.

Exit status, for scripts:
  0  done; for peek, Redis holds something for KEY
  1  Redis could not be reached, or failed
  2  a mistake on the command line
  3  nothing found: peek of a KEY Redis holds nothing for, reset of such a
     KEY (the others are reset), policies under a prefix with no key; stderr
     says what was looked for, where, and the likely mistake (a key that
     should be -account or -phone, RATEKIT_KEY_SECRET, REDIS_URL unset or
     without the app's database, -policy, -prefix)
`

// Exit codes, for scripts: the usage text lists them.
const (
	exitOK       = 0 // done; for peek, Redis holds something for the key
	exitError    = 1 // Redis could not be reached, or failed
	exitUsage    = 2 // a mistake on the command line
	exitNotFound = 3 // nothing found: peek of a key Redis holds nothing for, reset of such a key, policies under no key
)

// errUsage marks a command-line mistake; the message is printed with the
// command's synopsis.
var errUsage = errors.New("usage")

// synopsis is each command's one line of help, printed after a mistake.
var synopsis = map[string]string{
	"peek":      "usage: ratekit peek -policy NAME [-rules LIMIT/WINDOW,...] [-account|-phone] KEY   (ratekit help: every flag)",
	"reset":     "usage: ratekit reset -policy NAME [-account|-phone] KEY...   (ratekit help: every flag)",
	"policies":  "usage: ratekit policies [-max N]   (ratekit help: every flag)",
	"functions": "usage: ratekit functions [-prune]   (ratekit help: every flag)",
	"grant":     "usage: ratekit grant -policy NAME (-extra N|-exempt) (-for DURATION|-until TIME) [-by WHO] [-note TEXT] [-account|-phone] KEY...   (ratekit help: every flag)",
	"revoke":    "usage: ratekit revoke -policy NAME [-account|-phone] KEY...   (ratekit help: every flag)",
	"":          "usage: ratekit peek|reset|policies|functions|grant|revoke [flags] [key ...]   (ratekit help: every flag)",
}

// Run executes one ratekit command line (args without the program name),
// reading the environment through getenv; it returns the process exit
// code: 0 on success, 1 on an error, 2 on a usage mistake, 3 when the
// lookup found nothing.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, args := args[0], args[1:]
	run, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "ratekit: unknown command %q\n%s\n", cmd, synopsis[""])
		return exitUsage
	}
	return exit(cmd, run(ctx, args, getenv, stdout, stderr), stderr)
}

// command is one command of ratekit: its arguments after its name.
type command func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// commands are ratekit's commands by name.
var commands = map[string]command{
	"peek": peek, "reset": reset, "policies": policies, "functions": functions, "grant": grant, "revoke": revoke,
}

// exit prints what err of cmd says on stderr, and returns the exit code.
func exit(cmd string, err error, stderr io.Writer) int {
	var nf *notFound
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "ratekit %s: %s\n%s\n", cmd, message(err, "usage: "), synopsis[cmd])
		return exitUsage
	case errors.As(err, &nf):
		fmt.Fprintf(stderr, "ratekit %s: %s\n%s\n", cmd, message(err, ""), nf.hint)
		return exitNotFound
	}
	fmt.Fprintf(stderr, "ratekit %s: %s\n", cmd, message(err, ""))
	return exitError
}

// message returns err's message for a line that starts "ratekit CMD: ",
// without prefix and without the "ratekit: " that the library's errors
// start with, wrapped or not, so that the line says ratekit once.
func message(err error, prefix string) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), prefix), "ratekit: ", "")
}

// notFound is the error of a lookup that found nothing: what it looked
// for, with a hint at the likely mistake.
type notFound struct {
	what, hint string
}

func (e *notFound) Error() string { return e.what }

// common holds the flags every command takes, and where it connected.
type common struct {
	cmd     string
	prefix  string
	timeout time.Duration
	// redis is where the command connected, without the password; doubt
	// says why it may not be the app's Redis ("" when REDIS_URL names
	// a server and a database).
	redis, doubt string
}

func newFlags(name string, _ io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Run prints the error and one line of help, not every flag.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c := &common{cmd: name}
	fs.StringVar(&c.prefix, "prefix", "ratekit", "key prefix of the app's Redis store (redisstore.WithPrefix)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound of the whole command")
	return fs, c
}

// parse parses args, flags and keys in any order, turning flag errors into
// usage errors. Everything after "--" is a key.
func parse(fs *flag.FlagSet, args []string) error {
	var flags, keys []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			keys = append(keys, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			keys = append(keys, a)
			continue
		}
		flags = append(flags, a)
		name, _, inline := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if f := fs.Lookup(name); f != nil && !inline && !isBool(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i]) // the flag's value
		}
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	// flags holds nothing but flags and their values, so nothing is left
	// over; parsing "--" and the keys makes the keys fs.Args().
	return fs.Parse(append([]string{"--"}, keys...))
}

// isBool reports whether f is a boolean flag, which takes no separate
// value.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// defaultURL is the Redis of peek and policies when REDIS_URL is not set.
const defaultURL = "redis://127.0.0.1:6379/0"

// redisURL returns the Redis URL of a command and how to show it: without
// the password, and saying where it came from and, when the URL names
// none, which database. doubt says why it may not be the app's Redis: the
// default, or database 0 for want of one in the URL. required refuses the
// default.
func redisURL(getenv func(string) string, required bool) (raw, shown, doubt string, err error) {
	raw = getenv("REDIS_URL")
	from := "REDIS_URL"
	if raw == "" {
		if required {
			return "", "", "", errors.New("REDIS_URL is not set: name the Redis to change, as in REDIS_URL=redis://host:6379/0")
		}
		raw, from = defaultURL, "REDIS_URL is not set: the default"
		doubt = "REDIS_URL is not set, so this looked in the default, " + defaultURL + ": set REDIS_URL to the app's Redis"
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Never show the URL: it may hold a password.
		return "", "", "", errors.New("REDIS_URL is not a valid redis:// URL")
	}
	if noDatabase(u) {
		from += "; it names no database: database 0"
		doubt = "REDIS_URL names no database, so this looked in database 0: add the app's, as in redis://host:6379/1"
	}
	return raw, u.Redacted() + " (" + from + ")", doubt, nil
}

// noDatabase reports whether u, a server's or a sentinel's URL, names no
// database (go-redis then uses database 0): no path for redis:// and
// rediss://, no db parameter for unix://. A Cluster has database 0 only,
// so the command does not know yet whether it matters.
func noDatabase(u *url.URL) bool {
	if u.Scheme == "unix" {
		return !u.Query().Has("db")
	}
	return strings.Trim(u.Path, "/") == ""
}

// conn is the Redis a command works on: one server, a Sentinel-managed
// master or a Cluster.
type conn struct {
	rdb redis.UniversalClient
	// cluster is rdb when it is a Cluster, whose every master a scan
	// must visit.
	cluster *redis.ClusterClient
	// addr is where REDIS_URL points (a node of a Cluster, a sentinel),
	// for messages.
	addr string
}

// open connects to Redis (REDIS_URL; required refuses the default), after
// saying where on stderr, and bounds the command by -timeout; done
// releases both. It dials once, so that a Redis that cannot be reached is
// reported as such and at once. Errors never show the URL: it may hold a
// password.
//
// REDIS_URL names one server, a node of a Cluster or a sentinel, as the
// app's go-redis client would take it: a Cluster node is found by asking
// the server (INFO server), and the command then works on the whole
// Cluster (redis.ParseClusterURL; more seed nodes as addr= parameters); a
// sentinel is named by a master_name= parameter (redis.ParseFailoverURL:
// the credentials of the URL are the sentinels', password= the master's;
// more sentinels as addr=), or found by asking the server, when the
// sentinel monitors one master only.
func (c *common) open(ctx context.Context, getenv func(string) string, stderr io.Writer, required bool) (_ *conn, _ context.Context, done func(), _ error) {
	raw, shown, doubt, err := redisURL(getenv, required)
	if err != nil {
		return nil, nil, nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	c.redis, c.doubt = u.Redacted(), doubt
	fmt.Fprintf(stderr, "ratekit %s: connecting to %s\n", c.cmd, shown)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	var cn *conn
	if u.Query().Has("master_name") {
		cn, err = c.sentinel(raw)
	} else {
		cn, err = c.probe(ctx, u)
	}
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	done = func() { cancel(); _ = cn.rdb.Close() }
	if err := cn.rdb.Ping(ctx).Err(); err != nil {
		done()
		return nil, nil, nil, unreachable(err, cn.addr, c.timeout)
	}
	return cn, ctx, done, nil
}

// probe connects to the server of REDIS_URL u and asks what it is: a
// standalone server is the command's Redis; a Cluster node or a sentinel
// leads to the Cluster or the master.
func (c *common) probe(ctx context.Context, u *url.URL) (*conn, error) {
	// The seeds (addr=) are the Cluster's or the sentinels', not options
	// of one server.
	q := u.Query()
	seeds := q.Has("addr")
	q.Del("addr")
	one := *u
	one.RawQuery = q.Encode()
	opt, err := redis.ParseURL(one.String())
	if err != nil {
		return nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	c.tune(&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout)
	rdb := redis.NewClient(opt)
	info, err := rdb.Info(ctx, "server").Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		// INFO not permitted (an ACL, a renamed command): a server of
		// its own, as before the command asked.
		info = ""
	case err != nil:
		_ = rdb.Close()
		return nil, unreachable(err, opt.Addr, c.timeout)
	}
	switch mode := infoField(info, "redis_mode"); mode {
	case "cluster":
		_ = rdb.Close()
		return c.clusterOf(u.String(), opt.Addr)
	case "sentinel":
		masters, err := rdb.Do(ctx, "SENTINEL", "MASTERS").Slice()
		_ = rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("sentinel at %s: %w", opt.Addr, err)
		}
		names := masterNames(masters)
		if len(names) != 1 {
			return nil, fmt.Errorf("the sentinel at %s monitors %d masters (%s): name one with ?master_name=NAME in REDIS_URL",
				opt.Addr, len(names), strings.Join(names, ", "))
		}
		q := u.Query()
		q.Set("master_name", names[0])
		withName := *u
		withName.RawQuery = q.Encode()
		return c.sentinel(withName.String())
	default:
		if seeds {
			_ = rdb.Close()
			return nil, fmt.Errorf("%w: REDIS_URL has addr= parameters, but the Redis at %s is neither a Cluster node nor a sentinel", errUsage, opt.Addr)
		}
		return &conn{rdb: rdb, addr: opt.Addr}, nil
	}
}

// clusterOf returns the Cluster whose node raw names.
func (c *common) clusterOf(raw, addr string) (*conn, error) {
	opt, err := redis.ParseClusterURL(raw)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a valid redis:// URL for a Redis Cluster")
	}
	c.tune(&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout)
	cc := redis.NewClusterClient(opt)
	return &conn{rdb: cc, cluster: cc, addr: addr + " (Redis Cluster)"}, nil
}

// sentinel returns the master that the sentinels of raw (with its
// master_name parameter) name.
func (c *common) sentinel(raw string) (*conn, error) {
	opt, err := redis.ParseFailoverURL(raw)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a valid redis:// URL for Redis Sentinel")
	}
	c.tune(&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout)
	rdb := redis.NewFailoverClient(opt)
	return &conn{rdb: rdb, addr: fmt.Sprintf("master %q of the sentinel at %s", opt.MasterName, opt.SentinelAddrs[0])}, nil
}

// tune sets the client options every connection of the command shares:
// bounded by -timeout, no retries, so that a failure shows at once.
func (c *common) tune(ctxTimeout *bool, retries, dialRetries *int, dialTimeout *time.Duration) {
	*ctxTimeout = true
	*retries = -1
	*dialRetries = 1
	*dialTimeout = c.timeout
}

// infoField returns the value of field name in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// masterNames returns the names in a SENTINEL MASTERS reply.
func masterNames(masters []any) []string {
	var names []string
	for _, m := range masters {
		var fields []any
		switch m := m.(type) {
		case []any:
			fields = m
		case map[any]any: // RESP3
			if n, ok := m["name"].(string); ok {
				names = append(names, n)
			}
			continue
		}
		for i := 0; i+1 < len(fields); i += 2 {
			if k, _ := fields[i].(string); k == "name" {
				if n, ok := fields[i+1].(string); ok {
					names = append(names, n)
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

// unreachable describes a failed first contact with the Redis at addr:
// the dial's own error ("connection refused"), not the deadline it ran
// into.
func unreachable(err error, addr string, timeout time.Duration) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		why := op.Err
		var sys *os.SyscallError
		if errors.As(why, &sys) {
			why = sys.Err
		}
		return fmt.Errorf("cannot connect to redis at %s: %w", addr, why)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer from redis at %s within %s (-timeout)", addr, timeout)
	}
	return fmt.Errorf("redis at %s: %w", addr, err)
}

// secretEnv holds the pseudonym secret of the app.
const secretEnv = "RATEKIT_KEY_SECRET"

// keyFlags are the flags of peek and reset that say what KEY is.
type keyFlags struct {
	account, phone, cleartext bool
	region, encoding          string
}

func addKeyFlags(fs *flag.FlagSet) *keyFlags {
	k := &keyFlags{}
	fs.BoolVar(&k.account, "account", false, "KEY is an account name: derive the stored key as personal.AccountKey does")
	fs.BoolVar(&k.phone, "phone", false, "KEY is a phone number: derive the stored key as personal.PhoneKey does")
	fs.StringVar(&k.region, "region", "", "with -phone: the app's personal.DefaultRegion (CN, US, ...)")
	fs.BoolVar(&k.cleartext, "cleartext", false, "with -account or -phone: the app stores the normalised value, not its pseudonym")
	fs.StringVar(&k.encoding, "secret-encoding", "raw", "encoding of "+secretEnv+": raw (its bytes), hex or base64")
	return k
}

// target is one KEY argument and the key the app stores for it.
type target struct {
	arg, key string
}

// targets returns the stored key of every KEY argument: the argument
// itself, or the key derived from it. It warns on stderr when a
// pseudonym is derived with personal's default secret.
func (k *keyFlags) targets(args []string, getenv func(string) string, stderr io.Writer, cmd string) (kind string, out []target, err error) {
	if err := k.check(); err != nil {
		return "", nil, err
	}
	if !k.account && !k.phone {
		for _, a := range args {
			out = append(out, target{a, a})
		}
		return "key", out, nil
	}
	opts, err := k.options(getenv, stderr, cmd)
	if err != nil {
		return "", nil, err
	}
	derive, kind := personal.AccountKey, "account"
	if k.phone {
		derive, kind = personal.PhoneKey, "phone"
	}
	for _, a := range args {
		key, err := derive(a, opts...)
		if err != nil {
			why := keyfunc.Reason(err)
			if why == "" {
				why = err.Error()
			}
			return "", nil, fmt.Errorf("%w: %s %q: %s", errUsage, kind, a, why)
		}
		out = append(out, target{a, key})
	}
	return kind, out, nil
}

// check refuses key flags that do not go together.
func (k *keyFlags) check() error {
	switch {
	case k.account && k.phone:
		return fmt.Errorf("%w: -account and -phone exclude each other", errUsage)
	case k.region != "" && !k.phone:
		return fmt.Errorf("%w: -region needs -phone", errUsage)
	case k.cleartext && !k.account && !k.phone:
		return fmt.Errorf("%w: -cleartext needs -account or -phone", errUsage)
	}
	return nil
}

// options returns the personal options that derive a stored key as the
// app does: cleartext or the secret, and with -phone the region.
func (k *keyFlags) options(getenv func(string) string, stderr io.Writer, cmd string) ([]personal.Option, error) {
	opts := []personal.Option{personal.Cleartext(k.cleartext)}
	if !k.cleartext {
		secret, err := k.secret(getenv)
		if err != nil {
			return nil, err
		}
		if secret == nil {
			fmt.Fprintf(stderr, "ratekit %s: %s is not set: using personal's default secret, right only for an app that sets no personal.Secret\n", cmd, secretEnv)
		}
		opts = append(opts, personal.Secret(secret))
	}
	if k.phone {
		region := strings.ToUpper(k.region)
		if region != "" && !phonenumbers.GetSupportedRegions()[region] {
			return nil, fmt.Errorf("%w: -region: unknown region %q", errUsage, k.region)
		}
		opts = append(opts, personal.DefaultRegion(region))
	}
	return opts, nil
}

// secret returns the secret of RATEKIT_KEY_SECRET, nil when it is not
// set. Errors never show it.
func (k *keyFlags) secret(getenv func(string) string) ([]byte, error) {
	v := getenv(secretEnv)
	var (
		b   []byte
		err error
	)
	switch k.encoding {
	case "raw":
		b = []byte(v)
	case "hex":
		b, err = hex.DecodeString(v)
	case "base64":
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err = enc.DecodeString(v); err == nil {
				break
			}
		}
	default:
		return nil, fmt.Errorf("%w: -secret-encoding %q: want raw, hex or base64", errUsage, k.encoding)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s is not valid %s", errUsage, secretEnv, k.encoding)
	case v == "":
		return nil, nil
	case len(b) == 0:
		return nil, fmt.Errorf("%w: %s is not valid %s", errUsage, secretEnv, k.encoding)
	}
	return b, nil
}

func peek(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags("peek", stderr)
	policy := fs.String("policy", "", "policy name (required)")
	rules := fs.String("rules", "", "the policy's rules, LIMIT/WINDOW separated by commas, to say whether a request now fits them (Redis holds what was admitted, not the limits)")
	algo := fs.String("algorithm", "", "the policy's algorithm: log (SlidingLog) or buckets (SlidingBuckets); by default what Redis holds for KEY")
	buckets := fs.Int("buckets", 0, "the policy's Buckets under SlidingBuckets (0: the default)")
	shards := fs.Int("shards", 0, "the policy's Shards (0: none); peek shows shard 0")
	asJSON := fs.Bool("json", false, "print JSON")
	kf := addKeyFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: peek takes exactly one key", errUsage)
	}
	p, err := peekPolicy(*policy, *rules, *algo, *buckets, *shards)
	if err != nil {
		return err
	}
	kind, targets, err := kf.targets(fs.Args(), getenv, stderr, c.cmd)
	if err != nil {
		return err
	}
	t := targets[0]
	cn, ctx, done, err := c.open(ctx, getenv, stderr, false)
	if err != nil {
		return err
	}
	defer done()
	v, err := look(ctx, cn, c.prefix, p, t, *algo == "")
	if err != nil {
		return fmt.Errorf("redis at %s: %w", cn.addr, err)
	}
	v.kind = kind
	if *asJSON {
		if err := printJSON(stdout, v.p, t.key, v.redisKey, v.d, v.h, v.locked, v.until, v.grant); err != nil {
			return err
		}
	} else {
		v.print(stdout)
	}
	if v.h.empty() && v.grant == nil {
		return &notFound{
			what: fmt.Sprintf("nothing found for %s under policy %s (Redis key %s, in %s)", t.describe(kind), p.Name, v.redisKey, c.redis),
			hint: c.notFoundHint(kind, []target{t}, getenv(secretEnv) != ""),
		}
	}
	return nil
}

// look reads what Redis holds for the key of t under p (shard 0) and, with
// rules, decides what a request of one unit would get now. guess takes the
// algorithm from what Redis holds.
func look(ctx context.Context, cn *conn, prefix string, p core.Policy, t target, guess bool) (*peeked, error) {
	store := redisstore.New(cn.rdb, redisstore.WithPrefix(prefix))
	base := redisKeys(store, p.Name, t.key, p.Shards)[0] // shard 0
	h, err := readHeld(ctx, cn.rdb, base)
	if err != nil {
		return nil, err
	}
	if guess && len(h.buckets) > 0 && len(h.log) == 0 {
		p.Algorithm = core.SlidingBuckets
	}
	v := &peeked{p: p, t: t, h: &h, redisKey: base}
	if v.grant, err = peekGrant(ctx, store, p, t.key); err != nil {
		return nil, err
	}
	v.locked, v.lockedFor = h.locked()
	if len(p.Rules) > 0 {
		if err := v.decide(ctx, store); err != nil {
			return nil, err
		}
	}
	if v.locked {
		v.until = time.Now().Add(v.lockedFor).UTC().Truncate(time.Second)
	}
	switch {
	case h.hashed:
		v.redisKey += ":m" // a lockout, calendar rules or a challenge: one hash
	case v.p.Algorithm == core.SlidingBuckets:
		v.redisKey += ":b"
	}
	return v, nil
}

// peekPolicy returns the policy that peek's flags describe, or a usage
// error naming what is wrong.
func peekPolicy(name, rules, algo string, buckets, shards int) (core.Policy, error) {
	p := core.Policy{Name: name, Buckets: buckets, Shards: shards}
	if rules != "" {
		var err error
		if p.Rules, err = parseRules(rules); err != nil {
			return p, err
		}
	}
	switch algo {
	case "", "log":
	case "buckets":
		p.Algorithm = core.SlidingBuckets
	default:
		return p, fmt.Errorf("%w: -algorithm %q: want log or buckets", errUsage, algo)
	}
	check := p
	if len(check.Rules) == 0 {
		// Any rule with room for every shard: what is left to check is
		// the name, the shards and the buckets.
		check.Rules = []core.Rule{{Limit: int64(max(shards, 1)), Window: time.Second}}
	}
	if err := check.Validate(); err != nil {
		return p, fmt.Errorf("%w: %w", errUsage, err)
	}
	return p, nil
}

// peeked is what peek found for one key: what Redis holds, and with the
// policy's rules the decision a request would get now.
type peeked struct {
	p         core.Policy
	kind      string // how the key was named (see keyFlags.targets)
	t         target
	h         *held
	redisKey  string
	d         core.Decision // with rules
	locked    bool
	lockedFor time.Duration
	until     time.Time   // the lockout's end, when locked
	grant     *core.Grant // the key's live grant, nil when none
}

// decide peeks at the key with the policy's rules on store.
func (v *peeked) decide(ctx context.Context, store *redisstore.Store) error {
	if v.h.lockUntil > 0 || v.h.hashed && v.p.Lockout.For == 0 {
		// The lockout's length does not matter to a peek, only that the
		// policy has one: then it reads the lockout, and the key's one
		// hash, where a policy with a lockout, a calendar rule or a
		// challenge keeps it all.
		v.p.Lockout = core.Lockout{For: time.Second}
	}
	l, failed, err := limiter(store, v.p)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	v.d, err = l.Peek(ctx, v.t.key)
	if err == nil && *failed != nil {
		err = *failed
	}
	if err != nil {
		return err
	}
	v.locked, v.lockedFor = v.d.Locked, v.d.RetryAfter
	return nil
}

// print writes v as text.
func (v *peeked) print(w io.Writer) {
	if v.kind == "key" {
		fmt.Fprintf(w, "policy %s, key %q (Redis key %s)\n", v.p.Name, v.t.key, v.redisKey)
	} else {
		fmt.Fprintf(w, "policy %s, %s %q (stored key %q, Redis key %s)\n", v.p.Name, v.kind, v.t.arg, v.t.key, v.redisKey)
	}
	if v.p.Shards > 1 {
		fmt.Fprintf(w, "shard 0 of %d: each shard holds a share of every rule\n", v.p.Shards)
	}
	v.h.print(w)
	if v.grant != nil {
		fmt.Fprintf(w, "grant: %s\n", describeGrant(*v.grant))
	}
	switch {
	case v.locked:
		fmt.Fprintf(w, "a request now: denied, locked out until %s (retry after %s)\n", v.until.Format(time.RFC3339), round(v.lockedFor))
	case len(v.p.Rules) == 0 && v.h.empty():
		fmt.Fprintln(w, "a request now: allowed, whatever the policy's rules")
	case len(v.p.Rules) == 0:
		fmt.Fprintln(w, "a request now: allowed unless a rule is full; -rules LIMIT/WINDOW,... (the policy's) says which")
	case v.d.Allowed:
		fmt.Fprintln(w, "a request now: allowed")
	default:
		fmt.Fprintf(w, "a request now: denied, retry after %s\n", round(v.d.RetryAfter))
	}
	for i, s := range v.d.Rules() {
		if s.Calendar != 0 {
			fmt.Fprintf(w, "  rule %d/%s: used %d, remaining %d", s.Limit, calendarName(v.p.Rules[i]), s.Used, s.Remaining())
		} else {
			fmt.Fprintf(w, "  rule %d/%s: used %d, remaining %d", s.Limit, s.Window, s.Used, s.Remaining())
		}
		if s.RetryAfter > 0 {
			fmt.Fprintf(w, ", full: retry after %s", round(s.RetryAfter))
		}
		switch {
		case s.Calendar != 0:
			fmt.Fprintf(w, ", period ends in %s", round(s.ResetAfter))
		case s.ResetAfter > 0:
			fmt.Fprintf(w, ", empty in %s", round(s.ResetAfter))
		}
		fmt.Fprintln(w)
	}
}

// calendarName names a calendar rule's period as -rules takes it:
// "month", or "month@Europe/Paris".
func calendarName(r core.Rule) string {
	if r.Location == nil || r.Location == time.UTC {
		return r.Calendar.String()
	}
	return r.Calendar.String() + "@" + r.Location.String()
}

// redisKeys returns the Redis keys of key under policy with SlidingLog,
// one per shard; add ":b" for SlidingBuckets. Shard i of a key is the
// key "<key>#<i>" after length bounding (package core, "Hot keys"), so
// it is built from the bounded form that store.Key puts in braces.
func redisKeys(store *redisstore.Store, policy, key string, shards int) []string {
	k := store.Key(policy, key)
	if shards <= 1 {
		return []string{k}
	}
	stem := strings.TrimSuffix(k, "}")
	out := make([]string, shards)
	for i := range out {
		out[i] = stem + "#" + strconv.Itoa(i) + "}"
	}
	return out
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
	Policy string `json:"policy"`
	// Key is the stored key: KEY, or the key derived from it.
	Key      string `json:"key"`
	RedisKey string `json:"redis_key"`
	// Allowed says whether a request of one unit would be admitted now;
	// absent when that takes the rules (-rules) and none were given.
	Allowed *bool `json:"allowed,omitempty"`
	// LockedUntil is set when the key is locked out: when it may retry,
	// in RFC 3339.
	LockedUntil string `json:"locked_until,omitempty"`
	// Rules are the states of the rules given with -rules.
	Rules []opshttp.RuleState `json:"rules,omitempty"`
	// Held is what Redis holds for the key.
	Held heldJSON `json:"held"`
	// Grant is the key's live grant; absent when none.
	Grant *opshttp.GrantState `json:"grant,omitempty"`
}

func printJSON(w io.Writer, p core.Policy, key, redisKey string, d core.Decision, h *held, locked bool, until time.Time, g *core.Grant) error {
	out := peekJSON{Policy: p.Name, Key: key, RedisKey: redisKey, Held: h.json(), Grant: grantJSON(g)}
	switch {
	case locked:
		out.Allowed = new(bool)
		out.LockedUntil = until.Format(time.RFC3339)
	case len(p.Rules) > 0:
		out.Allowed = &d.Allowed
	case h.empty():
		out.Allowed = new(bool)
		*out.Allowed = true
	}
	for _, s := range d.Rules() {
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
	shards := fs.Int("shards", 0, "the policy's Shards (0: none)")
	kf := addKeyFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	p, err := resetPolicy(*policy, *shards, fs.NArg())
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
	r := resetter{p: p, cn: cn, stdout: stdout, stderr: stderr, kind: kind}
	r.store = redisstore.New(cn.rdb, redisstore.WithPrefix(c.prefix))
	if r.l, _, err = limiter(r.store, p); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var missing []target
	for _, t := range targets {
		n, err := r.reset(ctx, t)
		if err != nil {
			return err
		}
		if n == 0 {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	what := fmt.Sprintf("nothing found for %d of the %d keys under policy %s (in %s)", len(missing), len(targets), p.Name, c.redis)
	if len(targets) == 1 {
		what = fmt.Sprintf("nothing found for %s under policy %s, nothing deleted (in %s)", missing[0].describe(kind), p.Name, c.redis)
	}
	return &notFound{what: what, hint: c.notFoundHint(kind, missing, getenv(secretEnv) != "")}
}

// resetPolicy returns the policy reset works on: reset does not depend on
// the rules, so any valid rule names the policy (with shards, one with
// room for every shard). nkeys is the number of KEY arguments.
func resetPolicy(name string, shards, nkeys int) (core.Policy, error) {
	if name == "" {
		return core.Policy{}, fmt.Errorf("%w: -policy is required", errUsage)
	}
	if nkeys == 0 {
		return core.Policy{}, fmt.Errorf("%w: reset takes one or more keys", errUsage)
	}
	p := core.Policy{Name: name, Rules: []core.Rule{{Limit: int64(max(shards, 1)), Window: time.Second}}, Shards: shards}
	if err := p.Validate(); err != nil {
		return core.Policy{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	return p, nil
}

// resetter resets keys of one policy and says what it deleted.
type resetter struct {
	p              core.Policy
	cn             *conn
	store          *redisstore.Store
	l              *core.Limiter
	stdout, stderr io.Writer
	kind           string
}

// reset resets t's key and prints how many Redis keys it deleted, which
// it returns.
func (r *resetter) reset(ctx context.Context, t target) (int64, error) {
	keys := redisKeys(r.store, r.p.Name, t.key, r.p.Shards)
	n, err := count(ctx, r.cn.rdb, keys...)
	if err == nil {
		err = r.l.Reset(ctx, t.key)
	}
	if err != nil {
		return 0, fmt.Errorf("redis at %s: %w", r.cn.addr, err)
	}
	name := strconv.Quote(t.key)
	if r.kind != "key" {
		name = fmt.Sprintf("%s %q (stored key %q)", r.kind, t.arg, t.key)
	}
	switch n {
	case 0:
		fmt.Fprintf(r.stdout, "reset %s %s: not found, nothing deleted\n", r.p.Name, name)
	case 1:
		fmt.Fprintf(r.stdout, "reset %s %s: deleted 1 Redis key\n", r.p.Name, name)
	default:
		fmt.Fprintf(r.stdout, "reset %s %s: deleted %d Redis keys\n", r.p.Name, name, n)
	}
	if n == 0 && r.p.Shards <= 1 {
		// The policy may have shards that -shards did not name.
		shard0 := redisKeys(r.store, r.p.Name, t.key, 2)[0]
		if m, err := count(ctx, r.cn.rdb, shard0); err == nil && m > 0 {
			fmt.Fprintf(r.stderr, "ratekit reset: %s exists: the policy has Shards; reset again with -shards N\n", shard0)
		}
	}
	return n, nil
}

// describe names t for a message: `key "alice"`, or `account "Alice"
// (stored key "…")` for an identifier of kind.
func (t target) describe(kind string) string {
	if kind == "key" {
		return fmt.Sprintf("key %q", t.key)
	}
	return fmt.Sprintf("%s %q (stored key %q)", kind, t.arg, t.key)
}

// notFoundHint says, on one line, why a lookup may have found nothing for
// the targets of kind ("key", "account" or "phone"), the likeliest
// mistake first: an account name or a phone number given as a key (the
// app stores their pseudonyms), a secret that is not the app's, a Redis
// or database that is not the app's, then the policy, prefix and key.
func (c *common) notFoundHint(kind string, targets []target, secretSet bool) string {
	var why []string
	switch {
	case kind != "key" && !secretSet:
		why = append(why, secretEnv+" is not set, so the "+kind+"'s key was derived with personal's public default secret: "+
			"set it to the app's secret (its personal.Secret)")
	case kind != "key":
		why = append(why, "is "+secretEnv+" the app's secret (its personal.Secret, with the same -secret-encoding)? "+
			"A different one derives another key")
	default:
		for _, t := range targets {
			if like := identifierLike(t.arg); like != "" {
				why = append(why, fmt.Sprintf("%q looks like %s: an app that keys by it with keyfunc/personal stores a pseudonym; "+
					"give -%s (with the app's %s)", t.arg, like, strings.Fields(like)[1], secretEnv))
				break
			}
		}
	}
	if c.doubt != "" {
		why = append(why, c.doubt)
	}
	if kind == "key" {
		why = append(why, fmt.Sprintf("is it the key as the app stores it, under this -policy and -prefix (%q)? "+
			"`ratekit policies` lists the policies Redis holds", c.prefix))
	} else {
		why = append(why, fmt.Sprintf("check -policy and -prefix (%q) too", c.prefix))
	}
	return "hint: " + strings.Join(why, "; ")
}

// identifierLike says what s looks like when it looks like an identifier
// that apps store as a pseudonym: "an account" (an e-mail address) or "a
// phone" number; "" otherwise.
func identifierLike(s string) string {
	if at := strings.IndexByte(s, '@'); at > 0 && at < len(s)-1 && !strings.ContainsAny(s, " /") {
		return "an account"
	}
	digits := 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case strings.ContainsRune("+-() .", r):
		default:
			return ""
		}
	}
	if digits >= 7 && strings.Count(s, ".") != 3 { // not an IPv4 address
		return "a phone"
	}
	return ""
}

// count returns how many of the Redis keys exist, each under the name of
// every kind a policy keeps (keyKinds: sliding log, buckets, calendar
// counts, lockout, leases). On a Cluster go-redis sends each EXISTS to the
// node of its slot.
func count(ctx context.Context, rdb redis.UniversalClient, keys ...string) (int64, error) {
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			// One key per EXISTS: the names of a key whose hash tag is
			// empty are in different Cluster slots.
			for _, kk := range keyKinds {
				p.Exists(ctx, k+kk.suffix)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.(*redis.IntCmd).Val()
	}
	return n, nil
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
	cn, ctx, done, err := c.open(ctx, getenv, stderr, false)
	if err != nil {
		return err
	}
	defer done()
	cs := &census{prefix: c.prefix, max: *maxKeys, found: map[string]*[len(columns)]int{}}
	if cn.cluster != nil {
		// Every master holds its slots' keys; replicas hold copies.
		err = cn.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := cs.scan(ctx, node); err != nil {
				return fmt.Errorf("node %s: %w", node.Options().Addr, err)
			}
			return nil
		})
	} else {
		err = cs.scan(ctx, cn.rdb)
	}
	if err != nil {
		return fmt.Errorf("redis at %s: %w", cn.addr, err)
	}
	if cs.print(stdout) > 0 {
		return nil
	}
	why := []string{fmt.Sprintf("is %q the app's key prefix (redisstore.WithPrefix)? Give it with -prefix", c.prefix)}
	if c.doubt != "" {
		why = append([]string{c.doubt}, why...)
	}
	return &notFound{
		what: fmt.Sprintf("no policy found: no key under the prefix %q (in %s)", c.prefix, c.redis),
		hint: "hint: " + strings.Join(why, "; "),
	}
}

// census counts the Redis keys of every policy under a prefix, by kind,
// scanning at most max keys; the masters of a Cluster are scanned at once.
type census struct {
	prefix string
	max    int

	mu               sync.Mutex
	found            map[string]*[len(columns)]int
	scanned, earlier int
}

// scan counts the keys of node.
func (cs *census) scan(ctx context.Context, node redis.Cmdable) error {
	iter := node.Scan(ctx, 0, escapeGlob(cs.prefix)+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if !cs.add(iter.Val()) {
			return nil
		}
	}
	return iter.Err()
}

// add counts key; it reports false once max keys were scanned.
func (cs *census) add(key string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.scanned >= cs.max {
		return false
	}
	cs.scanned++
	name, kind, ok := parseKey(cs.prefix, key)
	if !ok {
		return true
	}
	n := cs.found[name]
	if n == nil {
		n = new([len(columns)]int)
		cs.found[name] = n
	}
	n[keyKinds[kind].column]++
	if keyKinds[kind].earlier {
		cs.earlier++
	}
	return true
}

// print writes the table, and returns the number of policies in it.
func (cs *census) print(w io.Writer) int {
	names := make([]string, 0, len(cs.found))
	for name := range cs.found {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%-24s", "POLICY")
	for _, c := range columns {
		fmt.Fprintf(w, " %12s", c)
	}
	fmt.Fprintln(w)
	for _, name := range names {
		fmt.Fprintf(w, "%-24s", name)
		for _, n := range cs.found[name] {
			fmt.Fprintf(w, " %12d", n)
		}
		fmt.Fprintln(w)
	}
	if cs.earlier > 0 {
		fmt.Fprintf(w, "(%s of LOCKOUT+CAL in the layout of earlier versions, a lockout or calendar counts "+
			"apart from the key's hash: its next decision moves them in)\n", plural(int64(cs.earlier), "key"))
	}
	if cs.scanned >= cs.max {
		fmt.Fprintf(w, "(stopped after %d keys: counts are partial; raise -max)\n", cs.scanned)
	}
	return len(names)
}

// columns are the columns of policies' table: the Redis keys of each kind.
var columns = [...]string{"SLIDINGLOG", "BUCKETS", "LOCKOUT+CAL", "INFLIGHT"}

// keyKinds are the Redis keys a policy keeps per key, by the suffix
// after <prefix>:<policy>:{<key>} (redisstore.Store.Key), and the column
// of policies' table that counts them. A policy with a lockout, calendar
// rules or a challenge keeps all of a key's state in one hash, ":m"
// (LOCKOUT+CAL). Earlier versions kept a lockout under ":l" and calendar
// counts under ":c" (internal/redislib's LockoutSuffix and
// CalendarSuffix), which the key's next decision moves into its hash:
// until then they are lockout and calendar state too, counted in
// LOCKOUT+CAL, and a line under the table says how many there are.
var keyKinds = [...]struct {
	suffix  string
	column  int  // in columns
	earlier bool // the layout of earlier versions
}{
	{"", 0, false}, {":b", 1, false}, {":m", 2, false}, {":lease", 3, false},
	{":c", 2, true}, {":l", 2, true},
}

// parseKey splits a Redis store key, <prefix>:<policy>:{<key>} with the
// suffix of its kind, an index in keyKinds.
func parseKey(prefix, k string) (policy string, kind int, ok bool) {
	rest, ok := strings.CutPrefix(k, prefix+":")
	if !ok {
		return "", 0, false
	}
	// A key ends with its suffix; only the sliding log's has none, and
	// ends with "}", as no suffix does.
	for i, kk := range keyKinds {
		if r, found := strings.CutSuffix(rest, kk.suffix); found && strings.HasSuffix(r, "}") {
			rest, kind = r, i
			break
		}
	}
	if !strings.HasSuffix(rest, "}") {
		return "", 0, false
	}
	i := strings.Index(rest, ":{")
	if i <= 0 {
		return "", 0, false
	}
	return rest[:i], kind, true
}

// escapeGlob escapes the glob characters of SCAN MATCH.
func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// parseRules parses "5/15m,20/24h"; a window may also be whole days
// ("10/1d"), or a calendar period in UTC or a time zone ("1000/day",
// "1000000/month@Europe/Paris").
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
		if r, ok, err := parseCalendar(n, win); ok || err != nil {
			if err != nil {
				return nil, fmt.Errorf("%w: rule %q: %w", errUsage, f, err)
			}
			rules = append(rules, r)
			continue
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

// parseCalendar parses a calendar rule's window, "month" or
// "month@Europe/Paris"; ok is false for another kind of window.
func parseCalendar(limit int64, win string) (r core.Rule, ok bool, err error) {
	period, zone, hasZone := strings.Cut(win, "@")
	r.Limit = limit
	switch period {
	case "day":
		r.Calendar = core.Day
	case "week":
		r.Calendar = core.Week
	case "month":
		r.Calendar = core.Month
	default:
		return r, false, nil
	}
	if hasZone {
		if r.Location, err = time.LoadLocation(zone); err != nil || zone == "" || zone == "Local" {
			return r, true, fmt.Errorf("unknown time zone %q", zone)
		}
	}
	return r, true, nil
}
