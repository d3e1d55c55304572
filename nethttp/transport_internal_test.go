package nethttp

import (
	"errors"
	"net/http"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func TestHostKey(t *testing.T) {
	for _, tc := range []struct {
		url, host, want string
	}{
		{url: "https://api.example.com/send", want: "api.example.com"},
		{url: "https://API.Example.com:443/send", want: "api.example.com"},
		{url: "https://api.example.com./send", want: "api.example.com"},
		{url: "http://api.example.com:80/send", want: "api.example.com"},
		{url: "https://api.example.com:80/send", want: "api.example.com:80"},
		{url: "http://api.example.com:8443/send", want: "api.example.com:8443"},
		{url: "http://127.0.0.1:8080/", want: "127.0.0.1:8080"},
		{url: "https://[2001:DB8::1]:443/", want: "2001:db8::1"},
		{url: "https://[2001:db8::1]:8443/", want: "[2001:db8::1]:8443"},
		{url: "/relative", host: "Partner.example:9000", want: "partner.example:9000"},
		{url: "/relative", want: ""},
	} {
		r, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.host != "" {
			r.Host = tc.host
		}
		got, err := hostKey(&outgoing{Request: keyfunc.FromHTTP(r, ""), r: r})
		if tc.want == "" {
			if !errors.Is(err, keyfunc.ErrNoKey) {
				t.Errorf("hostKey(%s) = %q, %v; want ErrNoKey", tc.url, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("hostKey(%s, Host %q) = %q, %v; want %q", tc.url, tc.host, got, err, tc.want)
		}
	}
	if _, err := hostKey(keyfunc.FromHTTP(&http.Request{}, "")); !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("hostKey of an incoming request view = %v, want ErrNoKey", err)
	}
}
