package personal_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func TestPhoneNormalisation(t *testing.T) {
	t.Parallel()
	const want = "+8613800138000"
	f := personal.Phone(personal.Cleartext(true), personal.Header("X-Phone"), personal.DefaultRegion("CN"))
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
			got, err := f(header(t, "X-Phone", in))
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
			got, err := personal.Phone(personal.Cleartext(true), personal.Header("X-Phone"), personal.DefaultRegion(tc.region))(header(t, "X-Phone", tc.in))
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
	f := personal.Phone(personal.Cleartext(true), personal.Header("X-Phone"), personal.DefaultRegion("CN"))
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
			got, err := f(header(t, "X-Phone", in))
			if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
				t.Fatalf("Phone(%.40q) = %q, %v; want error wrapping ErrInvalidKey", in, got, err)
			}
			if msg := err.Error(); strings.Contains(msg, in) || len(msg) > 200 {
				t.Errorf("Phone(%.40q) error %q echoes the input or is long", in, msg)
			}
			if got := keyfunc.Reason(err); got != "invalid phone number" {
				t.Errorf("Reason(Phone(%.40q)) = %q, want %q", in, got, "invalid phone number")
			}
		})
	}
}

func TestPhoneSources(t *testing.T) {
	t.Parallel()
	const number = "+8613800138000"
	ok := want{key: number}
	noKey := want{err: keyfunc.ErrNoKey}
	invalid := want{err: keyfunc.ErrInvalidKey}
	noNumber := want{err: keyfunc.ErrInvalidKey, reason: "no phone number in request"}
	malformed := want{err: keyfunc.ErrInvalidKey, reason: "malformed request body"}
	conflict := want{err: keyfunc.ErrInvalidKey, reason: "conflicting phone numbers in request"}
	region := personal.DefaultRegion("CN")
	clear := personal.Cleartext(true)
	const (
		jsonType = "application/json"
		formType = "application/x-www-form-urlencoded"
	)
	tests := []struct {
		name string
		f    keyfunc.Func // nil: Phone with the default sources
		req  req
		want want
	}{
		// Defaults: Field("phone"), that is a JSON body, a form body, the query.
		{"default json", nil, req{ctype: jsonType, body: `{"name":"x","phone":"+86 138-0013-8000"}`}, ok},
		{"default json with charset", nil, req{ctype: "application/json; charset=utf-8", body: ` {"phone":"13800138000"}`}, ok},
		{"default json problem+json", nil, req{ctype: "application/vnd.api+json", body: `{"phone":"13800138000"}`}, ok},
		{"default json without content type", nil, req{body: `{"phone":"13800138000"}`}, ok},
		{"default json sent as text/plain", nil, req{ctype: "text/plain", body: "\n{\"phone\":\"13800138000\"}"}, ok},
		{"default json number", nil, req{ctype: jsonType, body: `{"phone":8613800138000}`}, ok},
		{"default json field case-insensitive", nil, req{ctype: jsonType, body: `{"PHONE":"13800138000"}`}, ok},
		{"default json matches disagree", nil, req{ctype: jsonType, body: `{"phone":"+1 202-555-0143","Phone":"13800138000"}`}, conflict},
		{"default json matches agree", nil, req{ctype: jsonType, body: `{"phone":"+86 138 0013 8000","Phone":"13800138000"}`}, ok},
		{"default json null ignored", nil, req{ctype: jsonType, body: `{"phone":"13800138000","phone":null}`}, ok},
		{"default json nested ignored", nil, req{ctype: jsonType, body: `{"user":{"phone":"+1 202-555-0143"},"phone":"13800138000"}`}, ok},
		{"default json escaped", nil, req{ctype: jsonType, body: `{"phone":"\u002b86 138 0013 8000"}`}, ok},
		{"default json trailing data ignored", nil, req{ctype: jsonType, body: `{"phone":"13800138000"} trailing`}, ok},
		{"default json missing field", nil, req{ctype: jsonType, body: `{"name":"x"}`}, noNumber},
		{"default json empty field", nil, req{ctype: jsonType, body: `{"phone":""}`}, noNumber},
		{"default json missing uses query", nil, req{target: "/?phone=13800138000", ctype: jsonType, body: `{"name":"x"}`}, ok},
		{"default json and query agree", nil, req{target: "/?phone=%2B8613800138000", ctype: jsonType, body: `{"phone":"138 0013 8000"}`}, ok},
		{"default json malformed", nil, req{ctype: jsonType, body: `{"phone":"13800138000"`}, malformed},
		{"default json not an object", nil, req{ctype: jsonType, body: `["13800138000"]`}, malformed},
		{"default json wrong type", nil, req{ctype: jsonType, body: `{"phone":["13800138000"]}`}, malformed},
		{"default json bool", nil, req{ctype: jsonType, body: `{"phone":true}`}, malformed},
		{"default json invalid number", nil, req{ctype: jsonType, body: `{"phone":"12345"}`}, want{err: keyfunc.ErrInvalidKey, reason: "invalid phone number"}},
		{"default form", nil, req{ctype: formType, body: "name=x&phone=%2B86+138-0013-8000"}, ok},
		{"default form second value bad", nil, req{ctype: formType, body: "phone=13800138000&phone=bad"}, conflict},
		{"default form missing uses query", nil, req{target: "/?phone=13800138000", ctype: formType, body: "name=x"}, ok},
		{"default form body and query disagree", nil, req{target: "/?phone=%2B12025550143", ctype: formType, body: "phone=13800138000"}, conflict},
		{"default form bad pairs skipped", nil, req{ctype: formType, body: "a=%zz&b;c=1&phone=13800138000"}, ok},
		{"default multipart refused", nil, req{ctype: "multipart/form-data; boundary=x", body: "--x\r\n"}, want{err: keyfunc.ErrInvalidKey, reason: "unsupported request body"}},
		{"default query", nil, req{target: "/?phone=13800138000"}, ok},
		{"default text body refused", nil, req{ctype: "text/plain", body: "phone=13800138000"}, noNumber},
		{"default nothing", nil, req{}, noKey},
		{"default white space body", nil, req{ctype: jsonType, body: " \r\n"}, noKey},

		// Explicit sources.
		{"header", personal.Phone(clear, personal.Header("x-phone"), region), req{headers: []string{"X-Phone", "13800138000"}}, ok},
		{"header absent", personal.Phone(clear, personal.Header("X-Phone"), region), req{target: "/?phone=13800138000"}, noKey},
		{"header only ignores the body", personal.Phone(clear, personal.Header("X-Phone"), region), req{ctype: "text/plain", body: "x"}, noKey},
		{"query", personal.Phone(clear, personal.Query("mobile"), region), req{target: "/?mobile=13800138000"}, ok},
		{"form field", personal.Phone(clear, personal.Form("mobile"), region), req{ctype: formType, body: "mobile=13800138000"}, ok},
		{"form ignores json", personal.Phone(clear, personal.Form("phone"), region), req{ctype: jsonType, body: `{"phone":"13800138000"}`}, noNumber},
		{"json field", personal.Phone(clear, personal.JSON("mobile"), region), req{ctype: jsonType, body: `{"mobile":"13800138000"}`}, ok},
		{"json ignores form", personal.Phone(clear, personal.JSON("phone"), region), req{ctype: formType, body: "phone=13800138000"}, noNumber},
		{"field", personal.Phone(clear, personal.Field("mobile"), region), req{target: "/?mobile=13800138000"}, ok},
		{"sources disagree", personal.Phone(clear, personal.Header("X-Phone"), personal.Query("phone"), region), req{target: "/?phone=%2B12025550143", headers: []string{"X-Phone", "13800138000"}}, conflict},
		{"header and body disagree", personal.Phone(clear, personal.Header("X-Phone"), personal.Field("phone"), region), req{ctype: jsonType, body: `{"phone":"+1 202-555-0143"}`, headers: []string{"X-Phone", "13800138000"}}, conflict},
		{"header and query agree", personal.Phone(clear, personal.Header("X-Phone"), personal.Query("phone"), region), req{target: "/?phone=%2B8613800138000", headers: []string{"X-Phone", "13800138000"}}, ok},
		{"next source when first empty", personal.Phone(clear, personal.Header("X-Phone"), personal.Query("phone"), region), req{target: "/?phone=13800138000"}, ok},
		{"invalid first source is not skipped", personal.Phone(clear, personal.Header("X-Phone"), personal.Query("phone"), region), req{target: "/?phone=13800138000", headers: []string{"X-Phone", "nonsense"}}, invalid},
		{"body over max", personal.Phone(clear, personal.MaxBody(16), region), req{ctype: jsonType, body: `{"phone":"13800138000"}`}, want{err: keyfunc.ErrInvalidKey, reason: "request body too large"}},
		{"body at max", personal.Phone(clear, personal.MaxBody(int64(len(`{"phone":"13800138000"}`))), region), req{ctype: jsonType, body: `{"phone":"13800138000"}`}, ok},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.f
			if f == nil {
				f = personal.Phone(clear, region)
			}
			check(t, f, tc.req, tc.want)
		})
	}
}

// TestPhoneHandlerView checks that Phone keys a request by the number the
// handler's own parsing (r.FormValue) sees, so moving the number to the
// query string cannot skip the limit; where the handler's parsers could
// see different numbers, the request is refused.
func TestPhoneHandlerView(t *testing.T) {
	t.Parallel()
	f := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"))
	for _, tc := range []struct {
		name, target, body string
		conflict           bool
	}{
		{"body", "/sms", "phone=13800138000", false},
		{"query", "/sms?phone=13800138000", "x=1", false},
		{"both", "/sms?phone=%2B12025550143", "phone=13800138000", true},
		{"body in another case", "/sms", "PHONE=13800138000", false},
		{"query and body in another case", "/sms?phone=13800138000", "PHONE=%2B12025550143", true},
		{"leading white space is part of the first name", "/sms", "\nphone=%2B12025550143&phone=13800138000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", tc.target, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			got, err := f(keyfunc.FromHTTP(r, ""))
			if tc.conflict {
				if !errors.Is(err, keyfunc.ErrInvalidKey) || keyfunc.Reason(err) != "conflicting phone numbers in request" {
					t.Errorf("Phone() = %q, %v; want a refusal of conflicting numbers", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Phone: %v", err)
			}
			seen := r.FormValue("phone")
			if seen == "" {
				// echo's binder: a field in another case.
				for k, v := range r.Form {
					if strings.EqualFold(k, "phone") {
						seen = v[0]
					}
				}
			}
			want, err := personal.PhoneKey(seen, personal.Cleartext(true), personal.DefaultRegion("CN"))
			if err != nil || got != want {
				t.Errorf("Phone() = %q; the handler sees %q (%v)", got, want, err)
			}
		})
	}
}

func TestPhoneRejectsLetters(t *testing.T) {
	t.Parallel()
	f := personal.Phone(personal.Header("X-Phone"), personal.DefaultRegion("US"))
	for _, in := range []string{"12345abcdef", "1-800-FLOWERS", "+1 202 555 O143"} {
		if got, err := f(header(t, "X-Phone", in)); !errors.Is(err, keyfunc.ErrInvalidKey) {
			t.Errorf("Phone(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
}

func TestPhoneKey(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	tests := []struct {
		name   string
		number string
		opts   []personal.Option
		want   string
	}{
		{"pseudonym by default", "+86 138-0013-8000", nil, personal.Pseudonym(nil, "+8613800138000")},
		{"secret", "+8613800138000", []personal.Option{personal.Secret(secret)}, personal.Pseudonym(secret, "+8613800138000")},
		{"cleartext", " tel:+86-138-0013-8000 ", []personal.Option{personal.Cleartext(true)}, "+8613800138000"},
		{"region", "13800138000", []personal.Option{personal.DefaultRegion("CN"), personal.Cleartext(true)}, "+8613800138000"},
		{"sources ignored", "+8613800138000", []personal.Option{personal.Header("X-Phone"), personal.Cleartext(true)}, "+8613800138000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := personal.PhoneKey(tc.number, tc.opts...)
			if err != nil || got != tc.want {
				t.Errorf("PhoneKey(%q) = %q, %v; want %q", tc.number, got, err, tc.want)
			}
			// The key Phone gives a request carrying the number.
			opts := append([]personal.Option{personal.Header("X-Phone")}, tc.opts...)
			if k, err := personal.Phone(opts...)(header(t, "X-Phone", tc.number)); err != nil || k != got {
				t.Errorf("Phone(X-Phone: %q) = %q, %v; PhoneKey gives %q", tc.number, k, err, got)
			}
		})
	}
	for _, in := range []string{"", "   ", "12345", "1-800-FLOWERS", strings.Repeat("1", 300)} {
		if got, err := personal.PhoneKey(in); !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
			t.Errorf("PhoneKey(%.20q) = %q, %v; want error wrapping ErrInvalidKey", in, got, err)
		}
	}
}
