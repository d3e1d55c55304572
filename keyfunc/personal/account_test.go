package personal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func TestAccount(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	alice := want{key: personal.Pseudonym(secret, "alice@example.com")}
	const jsonType = "application/json"
	tests := []struct {
		name string
		f    keyfunc.Func // nil: Account with the default sources and secret
		req  req
		want want
	}{
		{"json username", nil, req{ctype: jsonType, body: `{"username":"Alice@Example.com"}`}, alice},
		{"json email fallback", nil, req{ctype: jsonType, body: `{"email":"  ALICE@example.COM  "}`}, alice},
		{"json username and email differ", nil, req{ctype: jsonType, body: `{"email":"bob@example.com","username":"alice@example.com"}`},
			want{err: keyfunc.ErrInvalidKey, reason: "conflicting account names in request"}},
		{"json username and email agree", nil, req{ctype: jsonType, body: `{"email":"alice@example.com","username":"ALICE@example.com"}`}, alice},
		{"form", nil, req{ctype: "application/x-www-form-urlencoded", body: "username=alice%40EXAMPLE.com&password=x"}, alice},
		{"fullwidth folded by NFKC", nil, req{ctype: jsonType, body: `{"username":"ａｌｉｃｅ@example.com"}`}, alice},
		{"json number", personal.Account(personal.Cleartext(true)), req{ctype: jsonType, body: `{"username":1234}`}, want{key: "1234"}},
		{"missing", nil, req{ctype: jsonType, body: `{"password":"x"}`}, want{err: keyfunc.ErrInvalidKey, reason: "no account name in request"}},
		{"blank", nil, req{ctype: jsonType, body: `{"username":"   "}`}, want{err: keyfunc.ErrInvalidKey, reason: "no account name in request"}},
		{"no body", nil, req{}, want{err: keyfunc.ErrNoKey}},
		{"too long", nil, req{ctype: jsonType, body: `{"username":"` + strings.Repeat("a", 400) + `"}`}, want{err: keyfunc.ErrInvalidKey, reason: "invalid account name"}},
		{"not json", nil, req{ctype: jsonType, body: `[1,2]`}, want{err: keyfunc.ErrInvalidKey, reason: "malformed request body"}},
		{"header source", personal.Account(personal.Header("X-User"), personal.Secret(secret)), req{headers: []string{"X-User", "Alice@example.com"}}, alice},
		{"header not utf-8", personal.Account(personal.Header("X-User")), req{headers: []string{"X-User", "\xffalice"}}, want{err: keyfunc.ErrInvalidKey, reason: "invalid account name"}},
		{"custom field", personal.Account(personal.Field("login"), personal.Secret(secret)), req{ctype: jsonType, body: `{"login":"alice@example.com","username":"bob"}`}, alice},
		{"region ignored", personal.Account(personal.DefaultRegion("CN"), personal.Secret(secret)), req{ctype: jsonType, body: `{"username":"alice@example.com"}`}, alice},
		{"cleartext", personal.Account(personal.Cleartext(true)), req{ctype: jsonType, body: `{"username":"Alice@Example.com"}`}, want{key: "alice@example.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.f
			if f == nil {
				f = personal.Account(personal.Secret(secret))
			}
			check(t, f, tc.req, tc.want)
		})
	}
}

func TestAccountKey(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	tests := []struct {
		name string
		in   string
		opts []personal.Option
		want string
	}{
		{"pseudonym by default", " Bob ", nil, personal.Pseudonym(nil, "bob")},
		{"secret", "Alice@Example.COM", []personal.Option{personal.Secret(secret)}, personal.Pseudonym(secret, "alice@example.com")},
		{"cleartext", "  ＡＬＩＣＥ ", []personal.Option{personal.Cleartext(true)}, "alice"},
		{"at the limit", strings.Repeat("a", personal.MaxAccountLen), []personal.Option{personal.Cleartext(true)}, strings.Repeat("a", personal.MaxAccountLen)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := personal.AccountKey(tc.in, tc.opts...)
			if err != nil || got != tc.want {
				t.Errorf("AccountKey(%.20q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			// The key Account gives a request naming the account.
			opts := append([]personal.Option{personal.Header("X-User")}, tc.opts...)
			if k, err := personal.Account(opts...)(header(t, "X-User", tc.in)); err != nil || k != got {
				t.Errorf("Account(X-User: %.20q) = %q, %v; AccountKey gives %q", tc.in, k, err, got)
			}
		})
	}
	for _, in := range []string{"", "  \t ", "\xffbob", strings.Repeat("a", personal.MaxAccountLen+1)} {
		got, err := personal.AccountKey(in)
		if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
			t.Errorf("AccountKey(%.20q) = %q, %v; want error wrapping ErrInvalidKey", in, got, err)
		} else if r := keyfunc.Reason(err); r != "invalid account name" {
			t.Errorf("Reason(AccountKey(%.20q)) = %q, want %q", in, r, "invalid account name")
		}
	}
}

func TestPseudonym(t *testing.T) {
	t.Parallel()
	a := personal.Pseudonym(nil, "+8613800138000")
	if a != personal.Pseudonym(nil, "+8613800138000") {
		t.Error("Pseudonym is not deterministic")
	}
	if a == personal.Pseudonym([]byte("other"), "+8613800138000") {
		t.Error("Pseudonym ignores the secret")
	}
	if a == personal.Pseudonym(nil, "+8613800138001") {
		t.Error("Pseudonym maps two numbers to one key")
	}
	if strings.Contains(a, "138") || !strings.HasPrefix(a, personal.PseudonymPrefix) || len(a) != len(personal.PseudonymPrefix)+22 {
		t.Errorf("Pseudonym = %q: want p: and 22 base64url characters, no trace of the number", a)
	}
	// Keys already in stores were named by keyfunc.Pseudonym: the
	// output bytes must not change.
	for _, tc := range []struct {
		secret      []byte
		value, want string
	}{
		{nil, "+8613800138000", "p:zkS7eGcpVNKHtT28q3Mkmw"},
		{nil, "alice@example.com", "p:xcZ_hT8C3qVySA4ebwIRMA"},
		{[]byte("app secret"), "alice", "p:xiXp_lo1hsd7PQgkJvnjOg"},
	} {
		if got := personal.Pseudonym(tc.secret, tc.value); got != tc.want {
			t.Errorf("Pseudonym(%q, %q) = %q, want %q", tc.secret, tc.value, got, tc.want)
		}
	}
}
