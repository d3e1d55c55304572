package keyfunc_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func TestPhoneNormalisation(t *testing.T) {
	t.Parallel()
	const want = "+8613800138000"
	f := keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.DefaultRegion("CN"))
	for _, in := range []string{
		"+86 138-0013-8000",
		"+8613800138000",
		"8613800138000",
		"86 138 0013 8000",
		"13800138000",
		"138 0013 8000",
		"(138) 0013-8000",
		"008613800138000",
		"+86 138 0013 8000 ext. 12",
		"tel:+86-138-0013-8000",
		"  +86 13800138000  ",
		"+８６ １３８００１３８０００", // full-width digits
	} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			got, err := f(newReq(t, "192.0.2.1:1", "X-Phone", in))
			if err != nil || got != want {
				t.Errorf("Phone(%q) = %q, %v; want %q", in, got, err, want)
			}
		})
	}
}

func TestPhoneRegion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, region, in, want string
		wantErr                error
	}{
		{name: "no region international", in: "+1 202-555-0143", want: "+12025550143"},
		{name: "no region country code without plus", in: "8613800138000", want: "+8613800138000"},
		{name: "no region national number", in: "13800138000", wantErr: keyfunc.ErrInvalidKey},
		{name: "lower-case region", region: "us", in: "(202) 555-0143", want: "+12025550143"},
		{name: "region does not bind international", region: "CN", in: "+44 20 7946 0958", want: "+442079460958"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.DefaultRegion(tc.region))(newReq(t, "192.0.2.1:1", "X-Phone", tc.in))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || got != "" {
					t.Errorf("Phone(%q) = %q, %v; want error %v", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Phone(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestPhoneInvalid(t *testing.T) {
	t.Parallel()
	f := keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.DefaultRegion("CN"))
	for _, in := range []string{
		"abc", "123", "+86 138", "+999 12345678", "8613800", "1380013800012345", "+", "+-",
		"\xff\xfe\xfd", "+86 138\x00 0013 8000", "+86" + strings.Repeat("1", 300), strings.Repeat("+86 ", 1000),
		"secret-token-1234567",
	} {
		name := in
		if len(name) > 30 {
			name = name[:30]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := f(newReq(t, "192.0.2.1:1", "X-Phone", in))
			if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
				t.Fatalf("Phone(%.40q) = %q, %v; want error wrapping ErrInvalidKey", in, got, err)
			}
			if msg := err.Error(); strings.Contains(msg, in) || len(msg) > 200 {
				t.Errorf("Phone(%.40q) error %q echoes the input or is long", in, msg)
			}
		})
	}
}

func TestPhoneSources(t *testing.T) {
	t.Parallel()
	const want = "+8613800138000"
	region := keyfunc.DefaultRegion("CN")
	tests := []struct {
		name    string
		f       keyfunc.Func
		target  string
		ctype   string
		body    string
		headers []string
		want    string
		wantErr error
	}{
		// Defaults: JSON body, form body, then query.
		{name: "default json", ctype: "application/json", body: `{"name":"x","phone":"+86 138-0013-8000"}`, want: want},
		{name: "default json with charset", ctype: "application/json; charset=utf-8", body: ` {"phone":"13800138000"}`, want: want},
		{name: "default json problem+json", ctype: "application/vnd.api+json", body: `{"phone":"13800138000"}`, want: want},
		{name: "default json without content type", body: `{"phone":"13800138000"}`, want: want},
		{name: "default json sent as text/plain", ctype: "text/plain", body: "\n{\"phone\":\"13800138000\"}", want: want},
		{name: "default json number", ctype: "application/json", body: `{"phone":8613800138000}`, want: want},
		{name: "default json field case-insensitive", ctype: "application/json", body: `{"PHONE":"13800138000"}`, want: want},
		{name: "default json last match wins", ctype: "application/json", body: `{"phone":"+1 202-555-0143","Phone":"13800138000"}`, want: want},
		{name: "default json null ignored", ctype: "application/json", body: `{"phone":"13800138000","phone":null}`, want: want},
		{name: "default json nested ignored", ctype: "application/json", body: `{"user":{"phone":"+1 202-555-0143"},"phone":"13800138000"}`, want: want},
		{name: "default json escaped", ctype: "application/json", body: `{"phone":"\u002b86 138 0013 8000"}`, want: want},
		{name: "default json trailing data ignored", ctype: "application/json", body: `{"phone":"13800138000"} trailing`, want: want},
		{name: "default json missing field", ctype: "application/json", body: `{"name":"x"}`, wantErr: keyfunc.ErrNoKey},
		{name: "default json empty field", ctype: "application/json", body: `{"phone":""}`, wantErr: keyfunc.ErrNoKey},
		{name: "default json missing uses query", target: "/?phone=13800138000", ctype: "application/json", body: `{"name":"x"}`, want: want},
		{name: "default json malformed", ctype: "application/json", body: `{"phone":"13800138000"`, wantErr: keyfunc.ErrInvalidKey},
		{name: "default json not an object", ctype: "application/json", body: `["13800138000"]`, wantErr: keyfunc.ErrInvalidKey},
		{name: "default json wrong type", ctype: "application/json", body: `{"phone":["13800138000"]}`, wantErr: keyfunc.ErrInvalidKey},
		{name: "default json bool", ctype: "application/json", body: `{"phone":true}`, wantErr: keyfunc.ErrInvalidKey},
		{name: "default json invalid number", ctype: "application/json", body: `{"phone":"12345"}`, wantErr: keyfunc.ErrInvalidKey},
		{name: "default form", ctype: "application/x-www-form-urlencoded", body: "name=x&phone=%2B86+138-0013-8000", want: want},
		{name: "default form first value", ctype: "application/x-www-form-urlencoded", body: "phone=13800138000&phone=bad", want: want},
		{name: "default form missing uses query", target: "/?phone=13800138000", ctype: "application/x-www-form-urlencoded", body: "name=x", want: want},
		{name: "default form body wins over query", target: "/?phone=%2B12025550143", ctype: "application/x-www-form-urlencoded", body: "phone=13800138000", want: want},
		{name: "default multipart refused", ctype: "multipart/form-data; boundary=x", body: "--x\r\n", wantErr: keyfunc.ErrInvalidKey},
		{name: "default query", target: "/?phone=13800138000", want: want},
		{name: "default text body ignored", ctype: "text/plain", body: "phone=13800138000", wantErr: keyfunc.ErrNoKey},
		{name: "default nothing", wantErr: keyfunc.ErrNoKey},

		// Explicit sources.
		{name: "header", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("x-phone"), region), headers: []string{"X-Phone", "13800138000"}, want: want},
		{name: "header absent", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), region), target: "/?phone=13800138000", wantErr: keyfunc.ErrNoKey},
		{name: "query", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneQuery("mobile"), region), target: "/?mobile=13800138000", want: want},
		{name: "form field", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneForm("mobile"), region), ctype: "application/x-www-form-urlencoded", body: "mobile=13800138000", want: want},
		{name: "form ignores json", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneForm("phone"), region), ctype: "application/json", body: `{"phone":"13800138000"}`, wantErr: keyfunc.ErrNoKey},
		{name: "json field", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneJSON("mobile"), region), ctype: "application/json", body: `{"mobile":"13800138000"}`, want: want},
		{name: "json skips form body", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneJSON("phone"), region), ctype: "application/x-www-form-urlencoded", body: `{"phone":"13800138000"}`, wantErr: keyfunc.ErrNoKey},
		{name: "sources in order", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.PhoneQuery("phone"), region), target: "/?phone=%2B12025550143", headers: []string{"X-Phone", "13800138000"}, want: want},
		{name: "next source when first empty", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.PhoneQuery("phone"), region), target: "/?phone=13800138000", want: want},
		{name: "invalid first source is not skipped", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneHeader("X-Phone"), keyfunc.PhoneQuery("phone"), region), target: "/?phone=13800138000", headers: []string{"X-Phone", "nonsense"}, wantErr: keyfunc.ErrInvalidKey},
		{name: "body over max", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.MaxBody(16), region), ctype: "application/json", body: `{"phone":"13800138000"}`, wantErr: keyfunc.ErrInvalidKey},
		{name: "body at max", f: keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.MaxBody(int64(len(`{"phone":"13800138000"}`))), region), ctype: "application/json", body: `{"phone":"13800138000"}`, want: want},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.f
			if f == nil {
				f = keyfunc.Phone(keyfunc.PhoneCleartext(true), region)
			}
			target := tc.target
			if target == "" {
				target = "/sms"
			}
			r := httptest.NewRequest("POST", target, strings.NewReader(tc.body))
			if tc.body == "" {
				r = httptest.NewRequest("POST", target, nil)
			}
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			for i := 0; i < len(tc.headers); i += 2 {
				r.Header.Add(tc.headers[i], tc.headers[i+1])
			}
			got, err := f(keyfunc.FromHTTP(r, ""))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || got != "" {
					t.Errorf("Phone() = %q, %v; want error %v", got, err, tc.wantErr)
				}
			} else if err != nil || got != tc.want {
				t.Errorf("Phone() = %q, %v; want %q", got, err, tc.want)
			}
			// Whatever happened, the handler reads the whole body.
			if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != tc.body {
				t.Errorf("body after Phone = %q, %v; want %q", rest, err, tc.body)
			}
		})
	}
}

// TestPhoneHandlerView checks that Phone keys a request by the number the
// handler's own parsing (r.FormValue) sees, so moving the number to the
// query string cannot skip the limit.
func TestPhoneHandlerView(t *testing.T) {
	t.Parallel()
	f := keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.DefaultRegion("CN"))
	for _, tc := range []struct{ name, target, body string }{
		{"body", "/sms", "phone=13800138000"},
		{"query", "/sms?phone=13800138000", "x=1"},
		{"both", "/sms?phone=%2B12025550143", "phone=13800138000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", tc.target, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			got, err := f(keyfunc.FromHTTP(r, ""))
			if err != nil {
				t.Fatalf("Phone: %v", err)
			}
			seen, err := keyfunc.Phone(keyfunc.PhoneCleartext(true), keyfunc.PhoneQuery("p"), keyfunc.DefaultRegion("CN"))(
				keyfunc.FromHTTP(httptest.NewRequest("GET", "/?p="+url.QueryEscape(r.FormValue("phone")), nil), ""))
			if err != nil || got != seen {
				t.Errorf("Phone() = %q; handler's FormValue gives %q (%v)", got, seen, err)
			}
		})
	}
}

func TestPhoneRejectsLetters(t *testing.T) {
	f := keyfunc.Phone(keyfunc.PhoneHeader("X-Phone"), keyfunc.DefaultRegion("US"))
	for _, in := range []string{"12345abcdef", "1-800-FLOWERS", "+1 202 555 O143"} {
		if got, err := f(newReq(t, "192.0.2.1:1", "X-Phone", in)); !errors.Is(err, keyfunc.ErrInvalidKey) {
			t.Errorf("Phone(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
}
