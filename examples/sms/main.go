// Command sms shows verification-code throttling with ratekit on echo.
// POST /sms/send takes {"phone": "..."} (JSON, a form, or ?phone=) and
// sends a code, limited three ways in one decision:
//
//   - per phone number, normalised to E.164 (with region CN,
//     "+86 138-0013-8000", "8613800138000" and "13800138000" are one
//     number): 1 per 60 s AND 5 per hour AND 10 per 24 hours, one policy
//     whose rules are checked atomically;
//   - per client IP: 20 per hour;
//   - for everyone together: 1000 per hour, a cap on the SMS bill.
//
// A request denied by one of them consumes nothing from the others, even
// on Redis Cluster where their keys live in different slots. A denial is
// 429 with Retry-After and an RFC 9457 problem+json body whose
// "violated-policies" names the binding rule: "sms-phone-60s",
// "sms-phone-3600s", "sms-phone-86400s", "sms-ip" or "sms-global". A
// missing or invalid number is 400. A code the provider failed to deliver
// (502) is not charged.
//
// The codes go out through the SMS provider's HTTP API, which allows 100
// sends per second for the whole fleet: the provider's client waits for
// its turn under that limit (nethttp.Transport), shared by every instance
// through the store, rather than have the provider refuse sends. A send
// that cannot get a turn within 5 s is answered 503 and not charged
// either. Set SMS_PROVIDER_URL to the provider's endpoint; without it a
// stand-in provider on a loopback port logs the masked numbers.
// -provider-rate N sets the provider's limit (sends per second, 100 by
// default), and -provider-stub ADDR serves nothing but a stand-in
// provider that prints how many sends reach it in each second, to watch
// the throttle, across instances too:
//
//	go run ./examples/sms -provider-stub 127.0.0.1:9099 &
//	SMS_PROVIDER_URL=http://127.0.0.1:9099/send go run ./examples/sms -provider-rate 2 &
//	for i in 0 1 2 3 4 5 6 7 8 9; do curl -s -o /dev/null -w '%{http_code} ' -d phone=1380013800$i localhost:8082/sms/send & done; wait
//	# 202 ×10; the stub prints "provider: 2 sends in second …" five times
//
//	go run ./examples/sms
//	curl -i -H 'Content-Type: application/json' -d '{"phone":"+86 138-0013-8000"}' localhost:8082/sms/send
//	curl -i -d phone=13800138000 localhost:8082/sms/send
//
// Phone numbers are personal data, so the limiters store only a keyed hash
// of each number (HMAC-SHA256): a dump of Redis shows no numbers. Set
// SMS_KEY_SECRET to a random secret, the same on every instance; without
// it ratekit's fixed public key is used, which still keeps numbers out of
// a dump but lets someone who has the dump test a guessed number against
// it. Behind a reverse proxy, name it with -trusted-proxy CIDR[,CIDR].
// Flags: -addr (127.0.0.1:8082), -trusted-proxy and -failure-policy
// local|open|closed, as in every example. Limits live in memory; set
// REDIS_URL to keep them in Redis.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/nethttp"
)

func main() {
	rate := flag.Int("provider-rate", 100, "sends per second the SMS provider allows, for the whole fleet")
	stub := flag.String("provider-stub", "", "serve only a stand-in SMS provider on this address, printing the sends that reach it in each second (then point SMS_PROVIDER_URL at http://ADDR/send)")
	flags := exampleenv.Parse("127.0.0.1:8082", exampleenv.ByIP)
	if *stub != "" {
		log.Printf("a stand-in SMS provider on http://%s/send: it prints how many sends reach it in each second", *stub)
		p := &countingProvider{out: os.Stdout, now: time.Now}
		go func() {
			for range time.Tick(time.Second) {
				p.record(false) // print the second that ended, if it had sends
			}
		}()
		srv := &http.Server{Addr: *stub, Handler: p, ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.ListenAndServe())
	}

	cfg := defaultConfig()
	cfg.clientIP = flags.ClientIP
	cfg.limiterOptions = flags.Options()
	cfg.secret = exampleenv.Secret("SMS_KEY_SECRET", "phone numbers")
	if *rate < 1 {
		log.Fatalf("-provider-rate %d: want at least 1 send per second", *rate)
	}
	cfg.providerRate = core.Rule{Limit: int64(*rate), Window: time.Second}

	store := exampleenv.Store()
	url := os.Getenv("SMS_PROVIDER_URL")
	if url == "" {
		url = standInProvider()
	}
	p, err := newProvider(store, url, cfg)
	if err != nil {
		log.Fatal(err)
	}
	a, err := newApp(store, p, cfg)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: try `curl -i -d phone=13800138000 http://%s/sms/send` twice", flags.Addr, flags.Addr)
	a.echo.HideBanner = true
	a.echo.Server.ReadHeaderTimeout = 5 * time.Second
	log.Fatal(a.echo.Start(flags.Addr))
}

// config holds the limits of POST /sms/send; tests change them.
type config struct {
	phoneRules     []core.Rule   // per phone number, all must hold
	perIP          core.Rule     // per client IP
	global         core.Rule     // for all requests together
	region         string        // region of numbers written without a country code
	secret         []byte        // HMAC key of phone keys; nil: keyfunc's public default
	clientIP       keyfunc.Func  // how the client IP is found
	limiterOptions []core.Option // options of every limiter
	providerRate   core.Rule     // sends to the provider, fleet-wide
	providerWait   time.Duration // how long a send may wait for its turn
}

func defaultConfig() config {
	return config{
		phoneRules: []core.Rule{
			{Limit: 1, Window: time.Minute},
			{Limit: 5, Window: time.Hour},
			{Limit: 10, Window: 24 * time.Hour},
		},
		perIP:        core.Rule{Limit: 20, Window: time.Hour},
		global:       core.Rule{Limit: 1000, Window: time.Hour},
		region:       "CN",
		clientIP:     keyfunc.ClientIP(),
		providerRate: core.Rule{Limit: 100, Window: time.Second},
		providerWait: 5 * time.Second,
	}
}

// app is the SMS service: its routes, the three limiters and the sender.
type app struct {
	echo   *echo.Echo
	phone  *core.Limiter // per phone number: 1/60 s, 5/h, 10/24 h
	ip     *core.Limiter // per client IP
	global *core.Limiter // for everyone
	number keyfunc.Func  // the E.164 number of a request, for the handler
	sender sender
}

// globalKey is the one key of the global cap.
const globalKey = "all"

// newApp builds the service on store.
func newApp(store core.Store, s sender, cfg config) (*app, error) {
	phone, err := core.NewLimiter(store, core.Policy{Name: "sms-phone", Rules: cfg.phoneRules}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	ip, err := core.NewLimiter(store, core.Policy{Name: "sms-ip", Rules: []core.Rule{cfg.perIP}}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	global, err := core.NewLimiter(store, core.Policy{Name: "sms-global", Rules: []core.Rule{cfg.global}}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	region := personal.DefaultRegion(cfg.region)
	a := &app{
		echo:   echo.New(),
		phone:  phone,
		ip:     ip,
		global: global,
		number: personal.Phone(region, personal.Cleartext(true)),
		sender: s,
	}
	everyone := func(keyfunc.Request) (string, error) { return globalKey, nil }

	a.echo.POST("/sms/send", a.send, echolimit.New(phone,
		// The phone's key is a keyed hash of the E.164 number.
		guard.WithKey(personal.Phone(region, personal.Secret(cfg.secret))),
		guard.WithNoKey(guard.NoKeyReject),
		// Decided together with the phone's rules: a request denied by any
		// of the three limits consumes nothing from the others.
		guard.WithAlso(ip, cfg.clientIP),
		guard.WithAlso(global, everyone),
		// A code the provider could not deliver is not charged.
		guard.WithCountIf(func(status int) bool { return status < http.StatusInternalServerError }),
		guard.WithBody(guard.BodyProblem),
		guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF),
	))
	return a, nil
}

// send sends a verification code to the request's number. The limiter has
// already checked that the number is valid.
func (a *app) send(c echo.Context) error {
	number, err := a.number(keyfunc.FromHTTP(c.Request(), c.Path()))
	if err != nil {
		return c.JSON(http.StatusBadRequest, map[string]string{"error": "a valid phone number is required"})
	}
	code, err := newCode() // a real service would keep it to check the reply
	if err != nil {
		log.Printf("sms: %v", err)
		return c.JSON(http.StatusInternalServerError, map[string]string{"error": "internal error"})
	}
	if err := a.sender.send(c.Request().Context(), number, code); err != nil {
		log.Printf("sms: send to %s failed: %v", mask(number), err)
		if errors.Is(err, errProviderBusy) {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"error": "too many codes are being sent, try again later"})
		}
		return c.JSON(http.StatusBadGateway, map[string]string{"error": "the code could not be sent, try again later"})
	}
	return c.JSON(http.StatusAccepted, map[string]string{"status": "sent"})
}

// newCode returns a random 6-digit code.
func newCode() (string, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		return "", fmt.Errorf("code: %w", err)
	}
	return fmt.Sprintf("%06d", n.Int64()), nil
}

// sender delivers a code by SMS.
type sender interface {
	send(ctx context.Context, number, code string) error
}

// provider sends codes through an SMS provider's HTTP API. Its client
// waits for a turn under the provider's fleet-wide limit.
type provider struct {
	url    string
	client *http.Client
	wait   time.Duration
}

// errProviderBusy is a send that found no turn under the provider's limit
// in time.
var errProviderBusy = errors.New("the SMS provider's limit is busy")

// newProvider returns the sender of the provider at url, limited by
// cfg.providerRate on store: on Redis, for every instance together.
func newProvider(store core.Store, url string, cfg config) (*provider, error) {
	l, err := core.NewLimiter(store, core.Policy{Name: "sms-provider", Rules: []core.Rule{cfg.providerRate}}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	return &provider{
		url:    url,
		client: &http.Client{Transport: nethttp.Transport(l, nil)},
		wait:   cfg.providerWait,
	}, nil
}

func (p *provider) send(ctx context.Context, number, code string) error {
	body, err := json.Marshal(map[string]string{"to": number, "text": "Your code is " + code})
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	// The wait for a turn and the call share one deadline.
	ctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", errProviderBusy, err)
		}
		return fmt.Errorf("provider: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("provider: status %d", res.StatusCode)
	}
	return nil
}

// standInProvider serves a stand-in for an SMS provider on a loopback
// port, logging the masked numbers, and returns its URL.
func standInProvider() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ To string }
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&m); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		log.Printf("provider: code sent to %s", mask(m.To))
		w.WriteHeader(http.StatusAccepted)
	})}
	go func() { log.Fatal(srv.Serve(lis)) }()
	url := "http://" + lis.Addr().String() + "/send"
	log.Printf("SMS_PROVIDER_URL is not set: a stand-in provider at %s logs the codes", url)
	return url
}

// mask hides the middle of a number for logs: "+8613800138000" is
// "+861380****000".
func mask(number string) string {
	if len(number) < 9 {
		return "****"
	}
	return number[:len(number)-7] + "****" + number[len(number)-3:]
}

// countingProvider is a stand-in SMS provider that counts the sends
// reaching it in each second of its own clock, as a provider that
// enforces its limit in strict one-second windows counts them, and prints
// each second's count (to out, by the clock now) once the second is over:
// when a send arrives in a later one, or a record(false) call finds it
// over.
type countingProvider struct {
	mu    sync.Mutex
	out   io.Writer
	now   func() time.Time
	sec   int64 // the second being counted (Unix)
	count int
}

func (p *countingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	p.record(true)
	w.WriteHeader(http.StatusAccepted)
}

// record counts a send (send true) at now, printing the count of a
// second that has ended.
func (p *countingProvider) record(send bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now().Unix()
	if now != p.sec {
		if p.count > 0 {
			fmt.Fprintf(p.out, "provider: %d sends in second %s\n", p.count, time.Unix(p.sec, 0).Format("15:04:05"))
		}
		p.sec, p.count = now, 0
	}
	if send {
		p.count++
	}
}
