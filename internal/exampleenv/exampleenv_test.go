package exampleenv

import (
	"flag"
	"net/http"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestParse(t *testing.T) {
	fromProxy := func() keyfunc.Request {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.2.3:5000"
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		return keyfunc.FromHTTP(r, "")
	}
	tests := []struct {
		args      []string
		keyedByIP bool
		addr      string
		failure   core.FailurePolicy
		key       string // the client-IP key of a request from 10.1.2.3 forwarding 203.0.113.7
		err       string
	}{
		{nil, true, "127.0.0.1:9", core.FailLocal, "10.1.2.3", ""},
		{[]string{"-addr", ":7", "-failure-policy", "closed"}, true, ":7", core.FailClosed, "10.1.2.3", ""},
		{[]string{"-failure-policy", "open", "-trusted-proxy", "10.0.0.0/8, 192.168.0.0/16"}, true, "127.0.0.1:9", core.FailOpen, "203.0.113.7", ""},
		{[]string{"-failure-policy", "local"}, false, "127.0.0.1:9", core.FailLocal, "10.1.2.3", ""},
		{[]string{"-failure-policy", "shut"}, true, "", 0, "", `-failure-policy "shut"`},
		{[]string{"-trusted-proxy", "10.0.0.0/33"}, true, "", 0, "", "-trusted-proxy"},
		{[]string{"-trusted-proxy", "10.0.0.0/8"}, false, "", 0, "", "not defined: -trusted-proxy"},
		{[]string{"stray"}, true, "", 0, "", "unexpected arguments: stray"},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("example", flag.ContinueOnError)
		f, err := parse(fs, tc.args, "127.0.0.1:9", tc.keyedByIP)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parse(%q) error = %v, want one saying %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parse(%q): %v", tc.args, err)
			continue
		}
		key, err := f.ClientIP(fromProxy())
		if f.Addr != tc.addr || f.Failure != tc.failure || key != tc.key || err != nil {
			t.Errorf("parse(%q) = addr %q, failure %v, key %q (%v); want %q, %v, %q", tc.args, f.Addr, f.Failure, key, err, tc.addr, tc.failure, tc.key)
		}
		if len(f.Options()) != 1 {
			t.Errorf("parse(%q).Options() = %d options, want the failure policy", tc.args, len(f.Options()))
		}
	}
}
