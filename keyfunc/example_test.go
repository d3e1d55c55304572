package keyfunc_test

import (
	"fmt"
	"net/http/httptest"
	"strings"

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

func ExamplePhone() {
	// PhoneCleartext shows the E.164 form; by default the key is its
	// pseudonym, so that the store holds no numbers.
	key := keyfunc.Phone(keyfunc.DefaultRegion("CN"), keyfunc.PhoneCleartext(true))

	for _, body := range []string{
		`{"phone": "+86 138-0013-8000"}`,
		`{"phone": "8613800138000"}`,
		`{"phone": "13800138000"}`,
		`{"phone": "12345"}`,
		`{"email": "someone@example.com"}`,
	} {
		r := httptest.NewRequest("POST", "/sms", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		k, err := key(keyfunc.FromHTTP(r, ""))
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "+8613800138000" <nil>
	// "+8613800138000" <nil>
	// "+8613800138000" <nil>
	// "" keyfunc: phone: not a valid phone number: keyfunc: invalid key
	// "" keyfunc: no key
}

func ExamplePseudonym() {
	key := keyfunc.Phone(keyfunc.DefaultRegion("CN"), keyfunc.PhoneSecret([]byte("app secret")))
	for _, phone := range []string{"+86 138-0013-8000", "13800138000"} {
		r := httptest.NewRequest("POST", "/sms", strings.NewReader(`{"phone":"`+phone+`"}`))
		k, _ := key(keyfunc.FromHTTP(r, ""))
		fmt.Println(k == keyfunc.Pseudonym([]byte("app secret"), "+8613800138000"), strings.Contains(k, "138"))
	}
	// Output:
	// true false
	// true false
}

func ExampleAccount() {
	key := keyfunc.Account(keyfunc.AccountCleartext(true))
	for _, body := range []string{`{"username":"  Alice@Example.COM "}`, `username=alice%40example.com`} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		if body[0] != '{' {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		k, err := key(keyfunc.FromHTTP(r, ""))
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "alice@example.com" <nil>
	// "alice@example.com" <nil>
}
