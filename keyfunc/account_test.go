package keyfunc_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func TestAccount(t *testing.T) {
	secret := []byte("s3cret")
	want := keyfunc.Pseudonym(secret, "alice@example.com")
	tests := []struct {
		name    string
		f       keyfunc.Func
		ctype   string
		body    string
		header  string
		want    string
		wantErr error
	}{
		{name: "json username", ctype: "application/json", body: `{"username":"Alice@Example.com"}`, want: want},
		{name: "json email fallback", ctype: "application/json", body: `{"email":"  ALICE@example.COM  "}`, want: want},
		{name: "form", ctype: "application/x-www-form-urlencoded", body: "username=alice%40EXAMPLE.com&password=x", want: want},
		{name: "fullwidth folded by NFKC", ctype: "application/json", body: `{"username":"ａｌｉｃｅ@example.com"}`, want: want},
		{name: "missing", ctype: "application/json", body: `{"password":"x"}`, wantErr: keyfunc.ErrNoKey},
		{name: "blank", ctype: "application/json", body: `{"username":"   "}`, wantErr: keyfunc.ErrNoKey},
		{name: "too long", ctype: "application/json", body: `{"username":"` + strings.Repeat("a", 400) + `"}`, wantErr: keyfunc.ErrInvalidKey},
		{name: "not json", ctype: "application/json", body: `[1,2]`, wantErr: keyfunc.ErrInvalidKey},
		{name: "header source", f: keyfunc.Account(keyfunc.AccountHeader("X-User"), keyfunc.AccountSecret(secret)), header: "Alice@example.com", want: want},
		{name: "custom field", f: keyfunc.Account(keyfunc.AccountField("login"), keyfunc.AccountSecret(secret)), ctype: "application/json", body: `{"login":"alice@example.com","username":"bob"}`, want: want},
		{name: "cleartext", f: keyfunc.Account(keyfunc.AccountCleartext(true)), ctype: "application/json", body: `{"username":"Alice@Example.com"}`, want: "alice@example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			if f == nil {
				f = keyfunc.Account(keyfunc.AccountSecret(secret))
			}
			r := httptest.NewRequest("POST", "/login", strings.NewReader(tc.body))
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			if tc.header != "" {
				r.Header.Set("X-User", tc.header)
			}
			got, err := f(keyfunc.FromHTTP(r, ""))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Account = %q, %v; want error %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Account = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPseudonym(t *testing.T) {
	a := keyfunc.Pseudonym(nil, "+8613800138000")
	if a != keyfunc.Pseudonym(nil, "+8613800138000") {
		t.Error("Pseudonym is not deterministic")
	}
	if a == keyfunc.Pseudonym([]byte("other"), "+8613800138000") {
		t.Error("Pseudonym ignores the secret")
	}
	if a == keyfunc.Pseudonym(nil, "+8613800138001") {
		t.Error("Pseudonym maps two numbers to one key")
	}
	if strings.Contains(a, "138") || !strings.HasPrefix(a, keyfunc.PseudonymPrefix) || len(a) != len(keyfunc.PseudonymPrefix)+22 {
		t.Errorf("Pseudonym = %q: want p: and 22 base64url characters, no trace of the number", a)
	}
	if got, want := keyfunc.AccountKey(nil, " Bob "), keyfunc.Pseudonym(nil, "bob"); got != want {
		t.Errorf("AccountKey = %q, want %q", got, want)
	}
}

func TestReason(t *testing.T) {
	phone := keyfunc.Phone(keyfunc.PhoneHeader("X-Phone"), keyfunc.DefaultRegion("CN"))
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-Phone", "0000000")
	_, err := phone(keyfunc.FromHTTP(r, ""))
	if got := keyfunc.Reason(err); got != "invalid phone number" {
		t.Errorf("Reason(%v) = %q, want %q", err, got, "invalid phone number")
	}
	if got := keyfunc.Reason(keyfunc.BodyTooLarge(10)); got != "request body too large" {
		t.Errorf("Reason(BodyTooLarge) = %q", got)
	}
	if !errors.Is(keyfunc.BodyTooLarge(10), keyfunc.ErrInvalidKey) {
		t.Error("BodyTooLarge does not wrap ErrInvalidKey")
	}
	if got := keyfunc.Reason(errors.New("x")); got != "" {
		t.Errorf("Reason(plain error) = %q, want \"\"", got)
	}
}
