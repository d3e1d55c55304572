package keyfunc_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ratekit/ratekit/keyfunc"
)

func ExampleClientIP() {
	key := keyfunc.ClientIP()

	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "203.0.113.9:52100"
	r.Header.Set("X-Forwarded-For", "198.51.100.1") // spoofed: not trusted
	k, _ := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)

	// IPv6 clients are grouped by /64.
	r.RemoteAddr = "[2001:db8:1:2:a:b:c:d]:52100"
	k, _ = key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)
	// Output:
	// 203.0.113.9
	// 2001:db8:1:2::/64
}

func ExampleClientIP_trustedProxies() {
	// The load balancers live in 10.0.0.0/8 and append to X-Forwarded-For.
	key := keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"))

	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "10.0.0.7:40000"
	// The client sent "198.51.100.1"; the edge proxy appended the client's
	// real address, and an inner proxy appended the edge proxy's.
	r.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.9, 10.0.0.3")
	k, _ := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)

	// The same headers from a peer outside 10.0.0.0/8 are ignored.
	r.RemoteAddr = "192.0.2.50:40000"
	k, _ = key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)
	// Output:
	// 203.0.113.9
	// 192.0.2.50
}

func ExampleForwardingHeader() {
	// The proxies in 10.0.0.0/8 maintain the RFC 7239 Forwarded header
	// and pass X-Forwarded-For through from the client.
	key := keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"), keyfunc.ForwardingHeader("Forwarded"))

	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "10.0.0.7:40000"
	r.Header.Set("Forwarded", `for="[2001:db8:1:2::7]:4711";proto=https`)
	r.Header.Set("X-Forwarded-For", "198.51.100.1") // the client's own: ignored
	k, _ := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)

	// The proxy's own health check carries no Forwarded header.
	r = httptest.NewRequest("GET", "/healthz", nil)
	r.RemoteAddr = "10.0.0.7:40001"
	k, _ = key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)

	// A Forwarded header that names no client is an error (400), not the
	// proxy's bucket.
	r.Header.Set("Forwarded", "for=unknown")
	_, err := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(errors.Is(err, keyfunc.ErrInvalidKey), keyfunc.Reason(err))
	// Output:
	// 2001:db8:1:2::/64
	// 10.0.0.7
	// true invalid forwarding header
}

func ExampleRoute() {
	key := keyfunc.Route()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		// Inside the mux, r.Pattern names the route: one key for all IDs.
		k, _ := key(keyfunc.FromHTTP(r, r.Pattern))
		fmt.Println(k)
	})
	outside := func(w http.ResponseWriter, r *http.Request) {
		// Around the whole mux, r.Pattern is still empty: an error, so
		// that the limit is not silently skipped or keyed per URL.
		_, err := key(keyfunc.FromHTTP(r, r.Pattern))
		fmt.Println(err != nil, errors.Is(err, keyfunc.ErrNoKey))
		mux.ServeHTTP(w, r)
	}
	outside(httptest.NewRecorder(), httptest.NewRequest("GET", "/users/42", nil))
	// Output:
	// true false
	// GET /users/{id}
}

func ExampleJoin() {
	// Limit each client per endpoint.
	key := keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route())

	r := httptest.NewRequest("GET", "/users/42", nil)
	r.RemoteAddr = "203.0.113.9:52100"
	k, _ := key(keyfunc.FromHTTP(r, "/users/:id"))
	fmt.Println(k)
	// Output:
	// 203.0.113.9|/users/:id
}
