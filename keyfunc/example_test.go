package keyfunc_test

import (
	"fmt"
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

func ExampleJoin() {
	// Limit each client per endpoint.
	key := keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route())

	r := httptest.NewRequest("GET", "/users/42", nil)
	r.RemoteAddr = "203.0.113.9:52100"
	k, _ := key(keyfunc.FromHTTP(r, "/users/:id"))
	fmt.Println(k)
	// Output:
	// 203.0.113.9|GET /users/:id
}
