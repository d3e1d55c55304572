package exampleenv

import (
	"flag"
	"net/http"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// fromProxy is a request from 10.1.2.3 forwarding 203.0.113.7.
func fromProxy() keyfunc.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:5000"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	return keyfunc.FromHTTP(r, "")
}

// parseCase parses args for an example that offers keys and checks the
// error against wantErr, a part of its text ("" for none); it reports
// whether there are flags left to check.
func parseCase(t *testing.T, args []string, keys Keys, wantErr string) (Flags, bool) {
	t.Helper()
	f, err := parse(flag.NewFlagSet("example", flag.ContinueOnError), args, "127.0.0.1:9", keys)
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parse(%q) error = %v, want one saying %q", args, err, wantErr)
		}
		return f, false
	case err != nil:
		t.Errorf("parse(%q): %v", args, err)
		return f, false
	}
	return f, true
}

func TestParse(t *testing.T) {
	tests := []struct {
		args    []string
		keys    Keys
		addr    string
		failure core.FailurePolicy
		key     string // the client-IP key of a request from 10.1.2.3 forwarding 203.0.113.7
		err     string
	}{
		{nil, ByIP, "127.0.0.1:9", core.FailLocal, "10.1.2.3", ""},
		{[]string{"-addr", ":7", "-failure-policy", "closed"}, ByIP, ":7", core.FailClosed, "10.1.2.3", ""},
		{[]string{"-failure-policy", "open", "-trusted-proxy", "10.0.0.0/8, 192.168.0.0/16"}, ByIP, "127.0.0.1:9", core.FailOpen, "203.0.113.7", ""},
		{[]string{"-failure-policy", "local"}, NotByIP, "127.0.0.1:9", core.FailLocal, "10.1.2.3", ""},
		{[]string{"-failure-policy", "shut"}, ByIP, "", 0, "", `-failure-policy "shut"`},
		{[]string{"-trusted-proxy", "10.0.0.0/33"}, ByIP, "", 0, "", "-trusted-proxy"},
		{[]string{"-trusted-proxy", "10.0.0.0/8"}, NotByIP, "", 0, "", "not defined: -trusted-proxy"},
		{[]string{"stray"}, ByIP, "", 0, "", "unexpected arguments: stray"},
		{[]string{"-block", "10.0.0.0/8"}, ByIP, "", 0, "", "not defined: -block"},
	}
	for _, tc := range tests {
		f, ok := parseCase(t, tc.args, tc.keys, tc.err)
		if !ok {
			continue
		}
		key, err := f.ClientIP(fromProxy())
		if f.Addr != tc.addr || f.Failure != tc.failure || key != tc.key || err != nil {
			t.Errorf("parse(%q) = addr %q, failure %v, key %q (%v); want %q, %v, %q", tc.args, f.Addr, f.Failure, key, err, tc.addr, tc.failure, tc.key)
		}
		if len(f.Options()) != 2 {
			t.Errorf("parse(%q).Options() = %d options, want the failure policy and the log observer", tc.args, len(f.Options()))
		}
	}
}

func TestParseBlock(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		blocked bool
		err     string
	}{
		{nil, false, ""},
		{[]string{"-block", "203.0.113.0/24"}, false, ""},                                // no trusted proxy: the client is the peer
		{[]string{"-block", "10.0.0.0/8"}, true, ""},                                     // the peer
		{[]string{"-trusted-proxy", "10.0.0.0/8", "-block", "203.0.113.0/24"}, true, ""}, // the forwarded client
		{[]string{"-trusted-proxy", "10.0.0.0/8", "-block", "10.0.0.0/8"}, false, ""},    // never the proxy
		{[]string{"-block", "10.0.0.0/33"}, false, `-block (the deny list): "10.0.0.0/33" is not a CIDR prefix`},
		{[]string{"-block", "1.2.3.4/40"}, false, `-block (the deny list): "1.2.3.4/40"`},
		{[]string{"-block", "192.0.2.1, 10.1.2.3"}, true, ""}, // single addresses
		{[]string{"-block", "10.1.2.0/24,bogus"}, false, `"bogus" is not a CIDR prefix`},
	} {
		f, ok := parseCase(t, tc.args, ByIPBlock, tc.err)
		if !ok {
			continue
		}
		if got := f.Block != nil && f.Block(fromProxy()); got != tc.blocked {
			t.Errorf("parse(%q): Block = %v, want %v", tc.args, got, tc.blocked)
		}
	}
}

// A bad -block entry is reported as the deny list's, never as a trusted
// proxy's.
func TestParseBlockErrorNamesTheDenyList(t *testing.T) {
	_, err := parse(flag.NewFlagSet("example", flag.ContinueOnError), []string{"-block", "1.2.3.4/40"}, "127.0.0.1:9", ByIPBlock)
	if err == nil || strings.Contains(err.Error(), "trusted proxy") || !strings.Contains(err.Error(), "deny list") {
		t.Errorf("parse(-block 1.2.3.4/40) error = %v, want one about the deny list, not a trusted proxy", err)
	}
}

// The help of -failure-policy is right for the gRPC example too: closed
// refuses with Unavailable there, not 503.
func TestFailurePolicyHelp(t *testing.T) {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	if _, err := parse(fs, nil, "127.0.0.1:9", ByIP); err != nil {
		t.Fatal(err)
	}
	if u := fs.Lookup("failure-policy").Usage; !strings.Contains(u, "gRPC Unavailable") || !strings.Contains(u, "HTTP 503") {
		t.Errorf("-failure-policy help %q, want it to name HTTP 503 and gRPC Unavailable", u)
	}
}
