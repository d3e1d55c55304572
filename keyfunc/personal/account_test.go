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

// TestAccountIgnorables: default-ignorable code points (Unicode's
// Default_Ignorable_Code_Point, which NFKC_Casefold drops) are invisible,
// so a name holding them is the name without them: one test per class.
func TestAccountIgnorables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ class, name string }{
		{"soft hyphen U+00AD", "al\u00adice"},
		{"combining grapheme joiner U+034F", "al\u034fice"},
		{"arabic letter mark U+061C", "al\u061cice"},
		{"hangul fillers U+115F U+1160 U+3164 U+FFA0", "\u115fal\u1160i\u3164c\uffa0e"},
		{"khmer inherent vowels U+17B4 U+17B5", "al\u17b4i\u17b5ce"},
		{"mongolian variation selectors and vowel separator U+180B..U+180F", "a\u180bl\u180ci\u180dc\u180ee\u180f"},
		{"zero width space U+200B", "al\u200bice"},
		{"zero width non-joiner and joiner U+200C U+200D", "al\u200ci\u200dce"},
		{"directional marks U+200E U+200F", "\u200ealice\u200f"},
		{"bidi embeddings and overrides U+202A..U+202E", "\u202aal\u202bi\u202cc\u202de\u202e"},
		{"word joiner U+2060", "al\u2060ice"},
		{"invisible operators U+2061..U+2064", "a\u2061l\u2062i\u2063c\u2064e"},
		{"bidi isolates U+2066..U+2069", "\u2066al\u2067i\u2068c\u2069e"},
		{"deprecated format characters U+206A..U+206F", "a\u206al\u206fice"},
		{"variation selectors U+FE00..U+FE0F", "al\ufe00ic\ufe0fe"},
		{"zero width no-break space U+FEFF", "\ufeffalice"},
		{"shorthand format controls U+1BCA0..U+1BCA3", "al\U0001bca0ice\U0001bca3"},
		{"musical symbol format controls U+1D173..U+1D17A", "al\U0001d173ice\U0001d17a"},
		{"tags U+E0001 U+E0020..U+E007F", "alice\U000e0001\U000e0041\U000e007f"},
		{"variation selectors supplement U+E0100..U+E01EF", "al\U000e0100ice\U000e01ef"},
		{"reserved default ignorables U+2065 U+FFF0 U+E0000", "al\u2065i\ufff0ce\U000e0000"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			t.Parallel()
			got, err := personal.AccountKey(tc.name, personal.Cleartext(true))
			if err != nil || got != "alice" {
				t.Errorf("AccountKey(%+q) = %q, %v; want \"alice\"", tc.name, got, err)
			}
		})
	}
	// Only invisible characters: no name at all.
	if got, err := personal.AccountKey("\u200b\u00ad\ufeff", personal.Cleartext(true)); !errors.Is(err, keyfunc.ErrInvalidKey) {
		t.Errorf("AccountKey(invisible only) = %q, %v; want an error wrapping ErrInvalidKey", got, err)
	}
	// Visible characters that look alike stay apart: only what is
	// invisible goes.
	if got, _ := personal.AccountKey("al-ice", personal.Cleartext(true)); got != "al-ice" {
		t.Errorf("AccountKey(\"al-ice\") = %q, want \"al-ice\"", got)
	}
}
