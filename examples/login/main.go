// Command login shows login anti-bruteforce with ratekit on gin. POST /login
// takes {"username", "password"} as JSON or as a form and is limited twice
// at once, counting failed logins (401) only:
//
//   - per client IP: 20 failures per 15 minutes; an address refused by
//     that limit is then locked out for an hour, even if it stops trying,
//     and twice as long each time it comes back for more, up to a day
//     (core.Lockout);
//   - per account (the username, trimmed and case-folded, stored in Redis
//     only as a keyed hash): 5 failures per 15 minutes, forgotten after a
//     successful login; from the 3rd attempt after 2 failures, the login
//     asks for a CAPTCHA first (core.Rule.Challenge).
//
// Each limiter reserves a unit before the password is checked and gives it
// back when the login succeeds, so 50 concurrent guesses at one account
// reach the password check exactly 2 times without a CAPTCHA and 5 times
// with one, and a user who logs in correctly a thousand times is never
// limited. Denials are 429 with Retry-After and an RFC 9457 problem+json
// body naming the limit ("login-ip" or "login-account"); no X-RateLimit
// fields are sent, so that nobody can read how many failures an account
// has.
//
// # Challenge before lockout
//
// After 2 failures the account's next attempt is challenged instead of
// checked: 429 with a problem+json body of type guard.ChallengeProblemType,
// no Retry-After, and a "captcha" member with the question. The client
// sends the login again with the answer in a "captcha" field; the app
// verifies it and records the pass (core.Limiter.Pass) before the account
// limiter decides, and the attempts go on, counted as before, until the
// 5th failure is refused. A challenged attempt counts toward nothing. A
// wrong answer is 403, which the per-IP limit counts as a failure. The
// pass lasts the 15 minutes, on every instance; a successful login
// forgets it with the failures. The CAPTCHA here is a stub whose answer
// is "human": a real app verifies the token of its CAPTCHA widget with
// the provider (reCAPTCHA, hCaptcha, Turnstile) or checks a second factor
// at that point.
//
//	curl -s -d username=alice -d password=guess localhost:8081/login     # 401, twice
//	curl -s -d username=alice -d password=guess localhost:8081/login     # 429: {"type":"…#challenge-before-lockout",…,"captcha":"type the word \"human\""}
//	curl -s -d username=alice -d password=wonderland -d captcha=human localhost:8081/login   # {"user":"alice"}
//
// Demo users: alice / wonderland and bob / builder.
//
//	go run ./examples/login
//	curl -i -d username=alice -d password=guess localhost:8081/login
//	curl -i -H 'Content-Type: application/json' -d '{"username":"Alice","password":"wonderland"}' localhost:8081/login
//
// Behind a reverse proxy, name it with -trusted-proxy CIDR[,CIDR] so that
// the client address is read from X-Forwarded-For; without it those
// headers are ignored and every client behind the proxy shares one limit.
// Flags: -addr (127.0.0.1:8081), -trusted-proxy and -failure-policy
// local|open|closed, as in every example, and -block CIDR[,CIDR]: clients
// refused with 403 before any limit (a deny list). Set LOGIN_KEY_SECRET
// (the same on every instance) to key the account hashes with a secret of
// your own; without it a fixed public key is used, which keeps names out
// of a Redis dump but lets a name be tested against it. Limits live in
// memory; set REDIS_URL to keep them in Redis.
//
// Support staff unlock an account through the app's admin routes
// (package opshttp), mounted at /admin/ratelimit/ when LOGIN_ADMIN_TOKEN
// is set, which take the user name and derive its stored key with the
// app's own secret:
//
//	LOGIN_ADMIN_TOKEN=s3cret go run ./examples/login
//	curl -s -H 'Authorization: Bearer s3cret' localhost:8081/admin/ratelimit/policies/login-account/keys/alice   # "allowed":false while locked
//	curl -s -X DELETE -H 'Authorization: Bearer s3cret' -w '%{http_code}\n' localhost:8081/admin/ratelimit/policies/login-account/keys/alice   # 204: unlocked
//
// or with the ratekit command (Redis mode), given the app's secret and the
// user name; either reset reaches every instance's cached denials at once:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 RATEKIT_KEY_SECRET="$LOGIN_KEY_SECRET" go run ./cmd/ratekit reset -policy login-account -account alice
//
// # The lockout trade-off
//
// A per-account limit stops password guessing spread over many addresses,
// but it lets anyone lock an account by failing on purpose: after 5
// failures the real owner is refused too, with the correct password,
// because the limiter answers before the password is checked (checking it
// anyway would hand the attacker an oracle). The lockout is bounded:
//
//   - it lasts at most the window (15 minutes) after the last counted
//     failure, and the 429 says when to retry (Retry-After, in seconds);
//   - the per-IP limit stops one address from locking many accounts: 20
//     failures per IP lock at most 20/5 = 4 accounts; the next attempt
//     locks the address out for an hour (then 2, 4, ... up to 24 hours),
//     and every attempt from it meanwhile is refused before it touches any
//     account's budget;
//   - an account that is not locked forgets its failures on the first
//     successful login.
//
// An attacker with many addresses can still keep an account locked by
// failing 5 times per window from each of them, if it answers the CAPTCHA
// each time. Shorter windows shorten the lockout but let a patient
// guesser try more often; the CAPTCHA after 2 failures makes every
// guess past them cost a solved challenge.
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/opshttp"
)

// demoUsers are the accounts of the demo, with their passwords.
var demoUsers = map[string]string{
	"alice": "wonderland",
	"bob":   "builder",
}

func main() {
	flags := exampleenv.Parse("127.0.0.1:8081", exampleenv.ByIPBlock)

	cfg := defaultConfig()
	cfg.clientIP = flags.ClientIP
	cfg.block = flags.Block
	cfg.limiterOptions = flags.Options()
	cfg.accountSecret = exampleenv.Secret("LOGIN_KEY_SECRET", "account keys")
	cfg.adminToken = os.Getenv("LOGIN_ADMIN_TOKEN")
	if cfg.adminToken == "" {
		log.Print("LOGIN_ADMIN_TOKEN is not set: the admin routes (/admin/ratelimit/) are not mounted")
	}

	users, err := newUserStore(bcrypt.DefaultCost, demoUsers)
	if err != nil {
		log.Fatal(err)
	}
	a, err := newApp(exampleenv.Store(), users, cfg)
	if err != nil {
		log.Fatal(err)
	}

	log.Printf("listening on %s: try `curl -i -d username=alice -d password=guess http://%s/login` six times", flags.Addr, flags.Addr)
	srv := &http.Server{Addr: flags.Addr, Handler: a.router, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// config holds the limits of the login route; tests shorten the windows.
type config struct {
	ipFailures       int64                                         // failed logins per client IP per window
	ipLockout        core.Lockout                                  // how long an address over its limit stays refused
	accountFailures  int64                                         // failed logins per account per window
	accountChallenge int64                                         // the attempt (failures + 1) from which a CAPTCHA is asked; 0: never
	verifyCaptcha    func(ctx context.Context, answer string) bool // checks an answer to the CAPTCHA
	window           time.Duration                                 // the window of both limits
	clientIP         keyfunc.Func                                  // how the client IP is found
	block            func(keyfunc.Request) bool                    // clients refused outright; nil: none
	accountSecret    []byte                                        // HMAC key of account keys; nil: keyfunc's public default
	limiterOptions   []core.Option                                 // options of both limiters
	adminToken       string                                        // bearer token of the admin routes; "" does not mount them
}

func defaultConfig() config {
	return config{
		ipFailures:      20,
		ipLockout:       core.Lockout{For: time.Hour, Max: 24 * time.Hour},
		accountFailures: 5,
		// The 3rd attempt after 2 failures asks for a CAPTCHA.
		accountChallenge: 3,
		verifyCaptcha:    stubCaptcha,
		window:           15 * time.Minute,
		clientIP:         keyfunc.ClientIP(),
	}
}

// captchaQuestion is the demo CAPTCHA's question, and stubCaptcha checks
// its answer. A real app asks its CAPTCHA provider to verify the token
// the widget gave the client (reCAPTCHA, hCaptcha, Turnstile: one HTTPS
// call), or checks a second factor (a TOTP code of the account) here.
const captchaQuestion = `type the word "human"`

func stubCaptcha(_ context.Context, answer string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.ToLower(strings.TrimSpace(answer))), []byte("human")) == 1
}

// app is the login service: its router and the two limiters in front of
// the password check.
type app struct {
	router     *gin.Engine
	ip         *core.Limiter // failures per client IP
	account    *core.Limiter // failures per account
	accountKey keyfunc.Func  // the account limiter's key function
	verify     func(ctx context.Context, answer string) bool
	users      authenticator
	checks     atomic.Int64 // password checks made: what the limiters protect
}

// newApp builds the service on store.
func newApp(store core.Store, users authenticator, cfg config) (*app, error) {
	ipLimit, err := core.NewLimiter(store, core.Policy{
		Name:    "login-ip",
		Rules:   []core.Rule{{Limit: cfg.ipFailures, Window: cfg.window}},
		Lockout: cfg.ipLockout,
	}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	accountLimit, err := core.NewLimiter(store, core.Policy{
		Name:  "login-account",
		Rules: []core.Rule{{Limit: cfg.accountFailures, Window: cfg.window, Challenge: cfg.accountChallenge}},
	}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	a := &app{router: gin.New(), ip: ipLimit, account: accountLimit, users: users, verify: cfg.verifyCaptcha,
		accountKey: personal.Account(personal.Secret(cfg.accountSecret))}
	a.router.Use(gin.Recovery())

	// Per IP first: an address over its limit is refused before its
	// request touches any account's budget. Both count 401 and 403 only.
	// Neither sends X-RateLimit fields: the account's would tell anyone
	// how many failures an account has, and a login client needs only
	// Retry-After, which denials carry.
	perIP := ginlimit.New(ipLimit,
		guard.WithKey(cfg.clientIP),
		guard.WithBlock(cfg.block),
		guard.WithCountIf(guard.StatusAuthFailure),
		guard.WithBody(guard.BodyProblem),
		guard.WithHeaders(guard.HeadersNone),
	)
	perAccount := ginlimit.New(accountLimit,
		guard.WithKey(a.accountKey),
		guard.WithCountIf(guard.StatusAuthFailure),
		guard.WithResetIf(guard.StatusSuccess),
		guard.WithBody(guard.BodyProblem),
		guard.WithHeaders(guard.HeadersNone),
		ginlimit.WithChallengeHandler(askForCaptcha),
	)
	if cfg.accountChallenge > 0 {
		a.router.POST("/login", perIP, a.answerChallenge, perAccount, a.login)
	} else {
		a.router.POST("/login", perIP, perAccount, a.login)
	}

	if cfg.adminToken != "" {
		// Support staff peek at and unlock keys here. The account
		// policy's routes take a user name and derive its stored key as
		// the limiter does, with the app's secret.
		admin := opshttp.Handler([]*core.Limiter{ipLimit, accountLimit},
			opshttp.WithAuthorization(func(next http.Handler) http.Handler { return bearer(cfg.adminToken, next) }),
			opshttp.WithKeyer("login-account", func(name string) (string, error) {
				return personal.AccountKey(name, personal.Secret(cfg.accountSecret))
			}))
		a.router.Any("/admin/ratelimit/*route", gin.WrapH(http.StripPrefix("/admin/ratelimit", admin)))
	}
	return a, nil
}

// bearer admits requests carrying "Authorization: Bearer <token>". A real
// app puts its own admin authentication here.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// credentials is the body of POST /login, JSON or form. Captcha is the
// answer to a challenge, when the client was asked for one.
type credentials struct {
	Username string `json:"username" form:"username"`
	Password string `json:"password" form:"password"`
	Captcha  string `json:"captcha,omitempty" form:"captcha"`
}

// askForCaptcha answers an attempt the account limiter challenged: the
// guard's default answer (429, problem+json of the challenge type, no
// Retry-After), with the question the client must answer in its next
// login's captcha field.
func askForCaptcha(c *gin.Context, v *guard.Verdict) {
	body, err := json.Marshal(map[string]any{
		"type":                guard.ChallengeProblemType,
		"title":               "Challenge required",
		"status":              http.StatusTooManyRequests,
		"detail":              "send the login again with the answer in the captcha field",
		"challenged-policies": []string{v.ItemName()},
		"captcha":             captchaQuestion,
	})
	if err != nil {
		ginlimit.Write(c, v) // the default answer
		return
	}
	c.Header("X-Content-Type-Options", "nosniff")
	c.Data(http.StatusTooManyRequests, "application/problem+json", append(body, '\n'))
}

// maxLoginBody bounds the body answerChallenge reads.
const maxLoginBody = 64 << 10

// answerChallenge runs before the account limiter: a login that carries
// a right answer to the CAPTCHA records that its account passed the
// challenge (core.Limiter.Pass), so that the limiter admits it and the
// account's next attempts; a wrong answer is refused with 403, which the
// per-IP limiter counts as a failure. A login without an answer goes on
// as it is. The body stays readable by the handler.
func (a *app) answerChallenge(c *gin.Context) {
	r := keyfunc.FromHTTP(c.Request, c.FullPath())
	answer := captchaField(r)
	if answer == "" {
		return // gin runs the rest of the chain
	}
	ctx := c.Request.Context()
	if !a.verify(ctx, answer) {
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "wrong CAPTCHA answer"})
		return
	}
	key, err := a.accountKey(r)
	if err != nil {
		return // the account limiter refuses the request (400)
	}
	if err := a.account.Pass(ctx, key); err != nil {
		// Not recorded: the account limiter challenges the attempt again.
		log.Printf("login: recording a passed CAPTCHA: %v", err)
	}
}

// captchaField returns the captcha field of a login's JSON or form body;
// "" when there is none or the body cannot be read.
func captchaField(r keyfunc.Request) string {
	body, err := r.Body(maxLoginBody)
	if err != nil {
		return ""
	}
	if strings.HasPrefix(r.Header("Content-Type"), "application/json") {
		var v struct {
			Captcha string `json:"captcha"`
		}
		if json.Unmarshal(body, &v) != nil {
			return ""
		}
		return v.Captcha
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return ""
	}
	return form.Get("captcha")
}

// login checks a password. Unknown users and wrong passwords get the same
// 401, which the limiters count.
func (a *app) login(c *gin.Context) {
	var req credentials
	if err := c.ShouldBind(&req); err != nil || strings.TrimSpace(req.Username) == "" || req.Password == "" {
		c.JSON(http.StatusBadRequest, gin.H{"error": "username and password are required"})
		return
	}
	a.checks.Add(1)
	if !a.users.authenticate(req.Username, req.Password) {
		c.JSON(http.StatusUnauthorized, gin.H{"error": "wrong username or password"})
		return
	}
	c.JSON(http.StatusOK, gin.H{"user": normalize(req.Username)})
}

// authenticator checks a user's password.
type authenticator interface {
	authenticate(username, password string) bool
}

// userStore is the demo's user table: bcrypt hashes by account name,
// normalised as the account limiter normalises it.
type userStore struct {
	hashes map[string][]byte
	dummy  []byte // checked for unknown names, so that they take as long
}

func newUserStore(cost int, passwords map[string]string) (*userStore, error) {
	u := &userStore{hashes: make(map[string][]byte, len(passwords))}
	for name, pw := range passwords {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
		if err != nil {
			return nil, err
		}
		n := normalize(name)
		if n == "" {
			return nil, errors.New("login: invalid demo user name")
		}
		u.hashes[n] = h
	}
	h, err := bcrypt.GenerateFromPassword([]byte("no such user"), cost)
	if err != nil {
		return nil, err
	}
	u.dummy = h
	return u, nil
}

func (u *userStore) authenticate(username, password string) bool {
	h, ok := u.hashes[normalize(username)]
	if !ok {
		h = u.dummy
	}
	return bcrypt.CompareHashAndPassword(h, []byte(password)) == nil && ok
}

// normalize returns the form under which the account limiter counts a
// name (trimmed, NFKC, case-folded); "" for a name it refuses.
func normalize(name string) string {
	n, err := personal.AccountKey(name, personal.Cleartext(true))
	if err != nil {
		return ""
	}
	return n
}
