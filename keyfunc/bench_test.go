package keyfunc_test

import (
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func BenchmarkClientIP(b *testing.B) {
	benchmarks := []struct {
		name    string
		f       keyfunc.Func
		remote  string
		headers []string
	}{
		{name: "no-proxies/ipv4", f: keyfunc.ClientIP(), remote: "203.0.113.9:52100", headers: []string{"X-Forwarded-For", "198.51.100.1"}},
		{name: "no-proxies/ipv6", f: keyfunc.ClientIP(), remote: "[2001:db8:1:2:a:b:c:d]:52100"},
		{name: "trusted/xff", f: keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8")), remote: "10.0.0.7:40000",
			headers: []string{"X-Forwarded-For", "198.51.100.1, 203.0.113.9, 10.0.0.3"}},
		{name: "trusted/forwarded", f: keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"), keyfunc.ForwardingHeader("Forwarded")), remote: "10.0.0.7:40000",
			headers: []string{"Forwarded", `for=198.51.100.1, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.3`}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = bm.remote
			for i := 0; i < len(bm.headers); i += 2 {
				r.Header.Add(bm.headers[i], bm.headers[i+1])
			}
			req := keyfunc.FromHTTP(r, "")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bm.f(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFromHTTP(b *testing.B) {
	r := httptest.NewRequest("GET", "/", nil)
	f := keyfunc.ClientIP()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(keyfunc.FromHTTP(r, "")); err != nil {
			b.Fatal(err)
		}
	}
}
