package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

type ctxKey struct{}

type stringer string

func (s stringer) String() string { return string(s) }

type ptrStringer struct{ id string }

func (p *ptrStringer) String() string { return p.id }

func TestSimpleKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", keyfunc.MaxValueLen+1)
	limit := strings.Repeat("k", keyfunc.MaxValueLen)
	tests := []struct {
		name    string
		f       keyfunc.Func
		target  string
		headers []string
		want    string
		wantErr error
	}{
		{name: "header", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", "acme"}, want: "acme"},
		{name: "header name case-insensitive", f: keyfunc.Header("x-tenant"), headers: []string{"X-TENANT", "acme"}, want: "acme"},
		{name: "header first value", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", "acme", "X-Tenant", "other"}, want: "acme"},
		{name: "header absent", f: keyfunc.Header("X-Tenant"), wantErr: keyfunc.ErrNoKey},
		{name: "header empty", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", ""}, wantErr: keyfunc.ErrNoKey},
		{name: "header non-utf-8 kept", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", "\xff\xfe"}, want: "\xff\xfe"},
		{name: "header at limit", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", limit}, want: limit},
		{name: "header too long", f: keyfunc.Header("X-Tenant"), headers: []string{"X-Tenant", long}, wantErr: keyfunc.ErrInvalidKey},
		{name: "query", f: keyfunc.Query("tenant"), target: "/?tenant=acme&tenant=other", want: "acme"},
		{name: "query escaped", f: keyfunc.Query("the key"), target: "/?the+key=a%20b%2Bc", want: "a b+c"},
		{name: "query escaped name", f: keyfunc.Query("k"), target: "/?%6B=v", want: "v"},
		{name: "query skips bad escapes", f: keyfunc.Query("k"), target: "/?k=%zz&k=ok", want: "ok"},
		{name: "query skips semicolons", f: keyfunc.Query("k"), target: "/?k=a;b&k=ok", want: "ok"},
		{name: "query absent", f: keyfunc.Query("tenant"), target: "/?other=1", wantErr: keyfunc.ErrNoKey},
		{name: "query empty", f: keyfunc.Query("tenant"), target: "/?tenant=", wantErr: keyfunc.ErrNoKey},
		{name: "query too long", f: keyfunc.Query("tenant"), target: "/?tenant=" + long, wantErr: keyfunc.ErrInvalidKey},
		{name: "app key header", f: keyfunc.AppKey(), target: "/?api_key=q", headers: []string{"X-API-Key", "h"}, want: "h"},
		{name: "app key query", f: keyfunc.AppKey(), target: "/?api_key=q", want: "q"},
		{name: "app key absent", f: keyfunc.AppKey(), wantErr: keyfunc.ErrNoKey},
		{name: "app key too long", f: keyfunc.AppKey(), headers: []string{"X-API-Key", long}, wantErr: keyfunc.ErrInvalidKey},
		{name: "app key custom header", f: keyfunc.AppKey(keyfunc.AppKeyHeader("Authorization-Key")), headers: []string{"X-API-Key", "h", "Authorization-Key", "c"}, want: "c"},
		{name: "app key custom query", f: keyfunc.AppKey(keyfunc.AppKeyQuery("key")), target: "/?api_key=q&key=c", want: "c"},
		{name: "app key header disabled", f: keyfunc.AppKey(keyfunc.AppKeyHeader("")), target: "/?api_key=q", headers: []string{"X-API-Key", "h"}, want: "q"},
		{name: "app key query disabled", f: keyfunc.AppKey(keyfunc.AppKeyQuery("")), target: "/?api_key=q", wantErr: keyfunc.ErrNoKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			target := tc.target
			if target == "" {
				target = "/"
			}
			r := httptest.NewRequest("GET", target, nil)
			for i := 0; i < len(tc.headers); i += 2 {
				r.Header.Add(tc.headers[i], tc.headers[i+1])
			}
			got, err := tc.f(keyfunc.FromHTTP(r, ""))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || got != "" {
					t.Errorf("key = %.40q, %v; want error %v", got, err, tc.wantErr)
				}
				if err != nil && len(err.Error()) > 200 {
					t.Errorf("error message is %d bytes long", len(err.Error()))
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("key = %.40q, %v; want %.40q, nil", got, err, tc.want)
			}
		})
	}
}

func TestUserID(t *testing.T) {
	t.Parallel()
	lookup := func(r keyfunc.Request) (string, bool) {
		id, ok := r.Context().Value(ctxKey{}).(string)
		return id, ok
	}
	tests := []struct {
		name    string
		value   any
		want    string
		wantErr error
	}{
		{name: "string", value: "u42", want: "u42"},
		{name: "missing", wantErr: keyfunc.ErrNoKey},
		{name: "empty", value: "", wantErr: keyfunc.ErrNoKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			if tc.value != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tc.value))
			}
			got, err := keyfunc.UserID(lookup)(keyfunc.FromHTTP(r, ""))
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("UserID() = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestUserIDFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		local     any // from the framework locals
		ctx       any // from the request context
		want      string
		wantErr   error
		wantOther bool // an error other than ErrNoKey
	}{
		{name: "context string", ctx: "u42", want: "u42"},
		{name: "local wins over context", local: "local", ctx: "ctx", want: "local"},
		{name: "stringer", ctx: stringer("s1"), want: "s1"},
		{name: "pointer stringer", ctx: &ptrStringer{"p1"}, want: "p1"},
		{name: "nil pointer stringer", ctx: (*ptrStringer)(nil), wantErr: keyfunc.ErrNoKey},
		{name: "int", local: 42, want: "42"},
		{name: "int64", local: int64(-7), want: "-7"},
		{name: "uint", local: uint(7), want: "7"},
		{name: "uint64", local: uint64(1 << 63), want: "9223372036854775808"},
		{name: "missing", wantErr: keyfunc.ErrNoKey},
		{name: "empty string", ctx: "", wantErr: keyfunc.ErrNoKey},
		{name: "empty stringer", ctx: stringer(""), wantErr: keyfunc.ErrNoKey},
		{name: "other type", ctx: 1.5, wantOther: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			if tc.ctx != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tc.ctx))
			}
			values := func(key any) any {
				if key == (ctxKey{}) {
					return tc.local
				}
				return nil
			}
			got, err := keyfunc.UserIDFrom(ctxKey{})(keyfunc.FromHTTPWithValues(r, "", keyfunc.LocalsFunc(values)))
			switch {
			case tc.wantOther:
				if err == nil || errors.Is(err, keyfunc.ErrNoKey) || got != "" {
					t.Errorf("UserIDFrom() = %q, %v; want an error other than ErrNoKey", got, err)
				}
			case !errors.Is(err, tc.wantErr) || got != tc.want:
				t.Errorf("UserIDFrom() = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, target, route, want string
	}{
		{name: "pattern", method: "GET", target: "/users/7", route: "/users/:id", want: "/users/:id"},
		{name: "servemux pattern with method", method: "GET", target: "/users/7", route: "GET /users/{id}", want: "GET /users/{id}"},
		{name: "servemux pattern with method matching HEAD", method: "HEAD", target: "/users/7", route: "GET /users/{id}", want: "GET /users/{id}"},
		{name: "servemux pattern with tab", method: "POST", target: "/login", route: "POST\t/login", want: "POST\t/login"},
		{name: "servemux pattern with method and host", method: "POST", target: "/login", route: "POST example.com/login", want: "POST example.com/login"},
		{name: "servemux pattern without method", method: "DELETE", target: "/users/7", route: "/users/{id}", want: "/users/{id}"},
		{name: "servemux pattern with host only", method: "GET", target: "/users/7", route: "example.com/users/{id}", want: "example.com/users/{id}"},
		{name: "pattern with a space in the path", method: "GET", target: "/a%20b", route: "/a b", want: "/a b"},
		{name: "grpc full method", method: "POST", target: "/auth.v1.Auth/Login", route: "/auth.v1.Auth/Login", want: "/auth.v1.Auth/Login"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keyfunc.Route()(keyfunc.FromHTTP(httptest.NewRequest(tc.method, tc.target, nil), tc.route))
			if err != nil || got != tc.want {
				t.Errorf("Route() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRouteMethodNotChosen: a client cannot pick its bucket by its
// choice of method. A pattern that accepts any method ("/login" on a
// ServeMux, which takes any token as a method; gin Any, echo Any, fiber
// All) is one key whatever method is sent, made-up ones included.
func TestRouteMethodNotChosen(t *testing.T) {
	t.Parallel()
	key := keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route())
	for _, route := range []string{"/login", "POST /login"} {
		seen := map[string]bool{}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "A1", "A2", "A19", "post"} {
			r := httptest.NewRequest(m, "/login", nil)
			k, err := key(keyfunc.FromHTTP(r, route))
			if err != nil {
				t.Fatalf("route %q, method %s: %v", route, m, err)
			}
			seen[k] = true
		}
		if len(seen) != 1 {
			t.Errorf("route %q: %d keys for one route, one per method: %v", route, len(seen), seen)
		}
	}
}

// routeView is a Request whose Route is fixed, like an adapter's view.
type routeView struct {
	keyfunc.Request
	route string
}

func (v routeView) Route() string { return v.route }

// TestRouteNoPattern checks that a request view without a route pattern
// (FromHTTP with route "", a view whose Route is "") is an error, not
// ErrNoKey, which the middleware skips by default, and not the path,
// which keys per URL.
func TestRouteNoPattern(t *testing.T) {
	t.Parallel()
	base := keyfunc.FromHTTP(httptest.NewRequest("GET", "/users/7", nil), "/users/:id")
	tests := []struct {
		name string
		r    keyfunc.Request
	}{
		{"FromHTTP without route", keyfunc.FromHTTP(httptest.NewRequest("POST", "/users/7?x=1", nil), "")},
		{"FromHTTPWithValues without route", keyfunc.FromHTTPWithValues(httptest.NewRequest("POST", "/users/7", nil), "", nil)},
		{"view with empty route", routeView{base, ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keyfunc.Route()(tc.r)
			if err == nil || errors.Is(err, keyfunc.ErrNoKey) || got != "" {
				t.Errorf("Route() = %q, %v; want an error other than ErrNoKey", got, err)
			}
			if err != nil && strings.Contains(err.Error(), "/users/7") {
				t.Errorf("Route() error %q quotes the path", err)
			}
		})
	}
}

// TestRouteServeMux keys through an http.ServeMux: inside the mux the
// pattern is known and every ID shares one key; middleware around the
// whole mux sees no pattern and gets an error, not a key per URL.
func TestRouteServeMux(t *testing.T) {
	t.Parallel()
	type result struct {
		key string
		err error
	}
	var inside, outside []result
	key := keyfunc.Route()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := key(keyfunc.FromHTTP(r, r.Pattern))
		inside = append(inside, result{k, err})
	})
	around := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := key(keyfunc.FromHTTP(r, r.Pattern))
		outside = append(outside, result{k, err})
		mux.ServeHTTP(w, r)
	})
	for _, p := range []string{"/users/1", "/users/2"} {
		around.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	if len(inside) != 2 || len(outside) != 2 {
		t.Fatalf("handlers ran %d and %d times, want 2 and 2", len(inside), len(outside))
	}
	for i, r := range inside {
		if want := "GET /users/{id}"; r.err != nil || r.key != want {
			t.Errorf("request %d inside the mux: Route() = %q, %v; want %q", i+1, r.key, r.err, want)
		}
	}
	for i, r := range outside {
		if r.err == nil || errors.Is(r.err, keyfunc.ErrNoKey) {
			t.Errorf("request %d around the mux: Route() = %q, %v; want an error other than ErrNoKey", i+1, r.key, r.err)
		}
	}
}

func constKey(k string) keyfunc.Func {
	return func(keyfunc.Request) (string, error) { return k, nil }
}

func errKey(err error) keyfunc.Func {
	return func(keyfunc.Request) (string, error) { return "", err }
}

func TestJoin(t *testing.T) {
	t.Parallel()
	r := newReq(t, "192.0.2.1:1")
	join := func(parts ...string) string {
		t.Helper()
		fs := make([]keyfunc.Func, len(parts))
		for i, p := range parts {
			fs[i] = constKey(p)
		}
		k, err := keyfunc.Join(fs...)(r)
		if err != nil {
			t.Fatalf("Join(%q): %v", parts, err)
		}
		return k
	}

	t.Run("readable", func(t *testing.T) {
		if got, want := join("192.0.2.1", "GET /login"), "192.0.2.1|GET /login"; got != want {
			t.Errorf("Join = %q, want %q", got, want)
		}
		if got, want := join("a|b", `c\d`), `a\|b|c\\d`; got != want {
			t.Errorf("Join = %q, want %q", got, want)
		}
	})

	pairs := []struct {
		name string
		a, b []string
	}{
		{"separator moved", []string{"a|b", "c"}, []string{"a", "b|c"}},
		{"escape moved", []string{`a\`, "b"}, []string{"a", `\b`}},
		{"escaped separator", []string{`a\|b`}, []string{`a\`, "b"}},
		{"empty parts", []string{"", "a"}, []string{"a", ""}},
		{"part count", []string{"a", ""}, []string{"a"}},
		{"trailing backslash", []string{`a\`, `|`}, []string{`a\|`}},
	}
	for _, tc := range pairs {
		t.Run(tc.name, func(t *testing.T) {
			if ka, kb := join(tc.a...), join(tc.b...); ka == kb {
				t.Errorf("Join(%q) = Join(%q) = %q", tc.a, tc.b, ka)
			}
		})
	}

	t.Run("client ip per route", func(t *testing.T) {
		req := keyfunc.FromHTTP(httptest.NewRequest("POST", "/login", nil), "/login")
		got, err := keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route())(req)
		if want := "192.0.2.1|/login"; err != nil || got != want {
			t.Errorf("Join(ClientIP, Route) = %q, %v; want %q", got, err, want)
		}
	})

	// A part without a key is left empty: the others still key the
	// request, as httprate's composite keys do, so an anonymous caller
	// keyed by IP and user is limited by IP, not let through.
	t.Run("no key in a part", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			fs   []keyfunc.Func
			want string
		}{
			{"first", []keyfunc.Func{errKey(keyfunc.ErrNoKey), constKey("b")}, "|b"},
			{"last", []keyfunc.Func{constKey("a"), errKey(fmt.Errorf("wrapped: %w", keyfunc.ErrNoKey))}, "a|"},
			{"middle", []keyfunc.Func{constKey("a"), errKey(keyfunc.ErrNoKey), constKey("c")}, "a||c"},
		} {
			if got, err := keyfunc.Join(tc.fs...)(r); err != nil || got != tc.want {
				t.Errorf("%s: Join() = %q, %v; want %q", tc.name, got, err, tc.want)
			}
		}
		type userKey struct{}
		anon := keyfunc.FromHTTP(httptest.NewRequest("GET", "/reports", nil), "/reports")
		ipUser := keyfunc.Join(keyfunc.ClientIP(), keyfunc.UserIDFrom(userKey{}))
		if got, err := ipUser(anon); err != nil || got != "192.0.2.1|" {
			t.Errorf("Join(ClientIP, UserIDFrom) without a user = %q, %v; want %q", got, err, "192.0.2.1|")
		}
		req := httptest.NewRequest("GET", "/reports", nil)
		signed := keyfunc.FromHTTP(req.WithContext(context.WithValue(req.Context(), userKey{}, "ada")), "/reports")
		if got, err := ipUser(signed); err != nil || got != "192.0.2.1|ada" {
			t.Errorf("Join(ClientIP, UserIDFrom) with a user = %q, %v; want %q", got, err, "192.0.2.1|ada")
		}
	})

	errBoom := errors.New("boom")
	errs := []struct {
		name string
		fs   []keyfunc.Func
		want error
	}{
		{"no key in any", []keyfunc.Func{errKey(keyfunc.ErrNoKey), errKey(fmt.Errorf("wrapped: %w", keyfunc.ErrNoKey))}, keyfunc.ErrNoKey},
		{"invalid key", []keyfunc.Func{constKey("a"), errKey(keyfunc.ErrInvalidKey)}, keyfunc.ErrInvalidKey},
		{"other error", []keyfunc.Func{constKey("a"), errKey(errBoom)}, errBoom},
		{"first error wins", []keyfunc.Func{errKey(errBoom), errKey(keyfunc.ErrNoKey)}, errBoom},
		{"malformed after no key", []keyfunc.Func{errKey(keyfunc.ErrNoKey), errKey(errBoom)}, errBoom},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyfunc.Join(tc.fs...)(r)
			if !errors.Is(err, tc.want) || got != "" {
				t.Errorf("Join() = %q, %v; want error %v", got, err, tc.want)
			}
		})
	}
}

func TestConstructorPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
	}{
		{"TrustedProxies bad cidr", func() { keyfunc.TrustedProxies("10.0.0.0/33") }},
		{"TrustedProxies bad address", func() { keyfunc.TrustedProxies("10.0.0.1", "proxy.internal") }},
		{"TrustedPrefixes zero prefix", func() { keyfunc.TrustedPrefixes(netipZeroPrefix()) }},
		{"IPv6Prefix 0", func() { keyfunc.IPv6Prefix(0) }},
		{"IPv6Prefix 129", func() { keyfunc.IPv6Prefix(129) }},
		{"ForwardingHeader space", func() { keyfunc.ForwardingHeader("X-Real-IP ") }},
		{"ForwardingHeader colon", func() { keyfunc.ForwardingHeader("X-Real-IP:") }},
		{"ForwardingHeader non-ascii", func() { keyfunc.ForwardingHeader("X-Réal-IP") }},
		{"IPv4Prefix 0", func() { keyfunc.IPv4Prefix(0) }},
		{"IPv4Prefix 33", func() { keyfunc.IPv4Prefix(33) }},
		{"AppKey no source", func() { keyfunc.AppKey(keyfunc.AppKeyHeader(""), keyfunc.AppKeyQuery("")) }},
		{"UserID nil", func() { keyfunc.UserID(nil) }},
		{"Join empty", func() { keyfunc.Join() }},
		{"Join nil", func() { keyfunc.Join(keyfunc.Route(), nil) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratekit: keyfunc: ") {
					t.Errorf("panic value %q; want a message starting with \"ratekit: keyfunc: \"", msg)
				}
			}()
			tc.f()
		})
	}
}
