// Package exampleenv holds what ratekit's example programs share: their
// common flags and the choice of store. It is internal so that the
// examples stay short without making it part of the API.
package exampleenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/ratekitslog"
	"github.com/ratekit/ratekit/redisstore"
)

// Flags are the command-line flags every example server takes.
type Flags struct {
	// Addr is -addr, the address to listen on.
	Addr string
	// ClientIP is the client-IP key function of -trusted-proxy: the TCP
	// peer's address without it, else the client address that the
	// proxies within the given CIDRs forwarded in X-Forwarded-For.
	ClientIP keyfunc.Func
	// Failure is -failure-policy: how limiters decide while the store
	// fails (local, open or closed; local by default).
	Failure core.FailurePolicy
	// Block is -block, a deny list for guard.WithBlock: whether the
	// client address (found as ClientIP finds it) is in one of the given
	// CIDRs. Nil without -block.
	Block func(keyfunc.Request) bool
}

// Options returns the limiter options the flags choose, and an observer
// that logs store failures, breaker changes and fallback episodes through
// log/slog (at most one line per kind and policy every 10 s), so that no
// switch to the failure policy goes unseen.
func (f Flags) Options() []core.Option {
	return []core.Option{
		core.WithFailurePolicy(f.Failure),
		core.WithObserver(ratekitslog.New(slog.Default(), 10*time.Second)),
	}
}

// Keys says what an example's limits key by, which decides the flags it
// takes.
type Keys int

const (
	// NotByIP means no limit is keyed by client IP: no -trusted-proxy.
	NotByIP Keys = iota
	// ByIP means a limit is keyed by client IP: -trusted-proxy.
	ByIP
	// ByIPBlock is ByIP and -block, a deny list the example applies
	// with guard.WithBlock(Flags.Block).
	ByIPBlock
)

// Parse defines -addr (defaultAddr unless given), -failure-policy and the
// flags keys calls for, then parses the command line with the flags the
// example defined itself. A bad value ends the program with the usage
// text, as the flag package does.
func Parse(defaultAddr string, keys Keys) Flags {
	f, err := parse(flag.CommandLine, os.Args[1:], defaultAddr, keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		flag.Usage()
		os.Exit(2)
	}
	return f
}

func parse(fs *flag.FlagSet, args []string, defaultAddr string, keys Keys) (Flags, error) {
	f := Flags{ClientIP: keyfunc.ClientIP()}
	fs.StringVar(&f.Addr, "addr", defaultAddr, "address to listen on")
	failure := fs.String("failure-policy", "local", "how limiters decide while Redis fails: local (each instance limits on its own), open (admit) or closed (refuse as unavailable: HTTP 503, gRPC Unavailable)")
	var proxy, block *string
	if keys >= ByIP {
		proxy = fs.String("trusted-proxy", "", "CIDRs of the reverse proxies in front of this server, comma-separated (e.g. 10.0.0.0/8): the client address is read from the X-Forwarded-For they append")
	}
	if keys == ByIPBlock {
		block = fs.String("block", "", "CIDRs of clients refused with 403 Forbidden before any limit, comma-separated (e.g. 203.0.113.0/24)")
	}
	if fs.ErrorHandling() != flag.ExitOnError {
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		return Flags{}, err
	}
	switch *failure {
	case "local":
		f.Failure = core.FailLocal
	case "open":
		f.Failure = core.FailOpen
	case "closed":
		f.Failure = core.FailClosed
	default:
		return Flags{}, fmt.Errorf("-failure-policy %q: want local, open or closed", *failure)
	}
	var ipOpts []keyfunc.IPOption
	if proxy != nil && *proxy != "" {
		trusted, err := keyfunc.ParseTrustedProxies(strings.Split(*proxy, ",")...)
		if err != nil {
			return Flags{}, fmt.Errorf("-trusted-proxy: %w", err)
		}
		ipOpts = append(ipOpts, keyfunc.TrustedPrefixes(trusted...))
		f.ClientIP = keyfunc.ClientIP(ipOpts...)
	}
	if block != nil && *block != "" {
		denied, err := parseNetworks(*block)
		if err != nil {
			return Flags{}, fmt.Errorf("-block (the deny list): %w", err)
		}
		f.Block = keyfunc.InNetworks(denied, ipOpts...)
	}
	if fs.NArg() > 0 {
		return Flags{}, errors.New("unexpected arguments: " + strings.Join(fs.Args(), " "))
	}
	return f, nil
}

// parseNetworks parses a comma-separated list of CIDR prefixes or single
// addresses, naming the first entry that is neither in its error.
func parseNetworks(list string) ([]netip.Prefix, error) {
	var nets []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			nets = append(nets, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix (203.0.113.0/24) or an IP address", s)
		}
		nets = append(nets, netip.PrefixFrom(a.WithZone(""), a.BitLen()))
	}
	return nets, nil
}

// Store returns the store an example program limits with: a
// [redisstore.Store] on REDIS_URL (for example redis://localhost:6379/0)
// when it is set, so that several instances share their limits, else a
// [core.MemoryStore]. It logs which one it chose, and exits the program
// with the reason if REDIS_URL does not parse or names a Redis that
// cannot be used as configured ([core.ErrMisconfigured]: a wrong
// password or database, an ACL that forbids ratekit's commands). A Redis
// that does not answer yet is not fatal: limiters follow their failure
// policy (-failure-policy) until it does. The Redis client lives as long
// as the program.
func Store() core.Store {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		log.Print("store: in-process memory (set REDIS_URL to share limits through Redis)")
		return core.NewMemoryStore()
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal("REDIS_URL is not a valid redis:// URL") // it may hold a password: do not print it
	}
	store := redisstore.New(redis.NewClient(opt))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch err := store.Check(ctx); {
	case errors.Is(err, core.ErrMisconfigured):
		log.Fatalf("store: %v", err)
	case errors.Is(err, redisstore.ErrUnsafeEviction):
		log.Printf("store: Redis at %s: %v", opt.Addr, err)
	case err != nil:
		log.Printf("store: Redis at %s does not answer yet (%v); until it does, limiters follow -failure-policy", opt.Addr, err)
	default:
		log.Printf("store: Redis at %s", opt.Addr)
	}
	return store
}

// Secret returns the key-hashing secret in the environment variable env,
// or nil (ratekit's public default key) with a warning naming what is
// hashed.
func Secret(env, what string) []byte {
	if s := os.Getenv(env); s != "" {
		return []byte(s)
	}
	log.Printf("%s is not set: %s are hashed with ratekit's public default key", env, what)
	return nil
}
