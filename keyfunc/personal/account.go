package personal

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ratekit/ratekit/keyfunc"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// MaxAccountLen bounds an account name, in bytes; a longer one is an
// error wrapping [keyfunc.ErrInvalidKey].
const MaxAccountLen = 320

var (
	errAccountTooLong  = withReason(fmt.Errorf("ratekit: personal: account: longer than %d bytes: %w", MaxAccountLen, keyfunc.ErrInvalidKey), "invalid account name")
	errAccountUTF8     = withReason(fmt.Errorf("ratekit: personal: account: not valid UTF-8: %w", keyfunc.ErrInvalidKey), "invalid account name")
	errAccountEmpty    = withReason(fmt.Errorf("ratekit: personal: account: empty name: %w", keyfunc.ErrInvalidKey), "invalid account name")
	errAccountNone     = withReason(fmt.Errorf("ratekit: personal: account: request body holds no account name: %w", keyfunc.ErrInvalidKey), "no account name in request")
	errAccountConflict = withReason(fmt.Errorf("ratekit: personal: account: request names different accounts: %w", keyfunc.ErrInvalidKey), "conflicting account names in request")
)

var account = &target{
	errNone:     errAccountNone,
	errConflict: errAccountConflict,
	normalize:   func(_ *config, raw string) (string, error) { return normalizeAccount(raw) },
}

// Account keys requests by the account a login names, for login
// anti-bruteforce: failures are counted per account whatever address they
// come from. The name is normalised (Unicode NFKC, trimmed, case-folded,
// without default-ignorable code points such as U+00AD soft hyphen,
// U+200B zero-width space, U+2060 word joiner or variation selectors,
// which are invisible), so "  Alice@Example.COM ", "al\u00adice@example.com"
// and "alice@example.com" are one account, and the key is its
// [Pseudonym] unless [Cleartext] is set.
//
// By default the name is read from [Field]("username") and
// [Field]("email"): those fields of a JSON object body, of a form body, or
// the query. A request that names one account in "username" and another
// in "email" is refused, since an app that logs in by email never reads
// "username" and the other way round: for a form that carries both and
// means different things by them (a sign-up), name the one the login
// reads with [Field]. [Header], [JSON], [Form], [Query] and [Field]
// choose other sources; [DefaultRegion] is ignored. Bodies are read
// through [keyfunc.Request.Body], which leaves them readable for the
// handler, up to [MaxBody] bytes.
//
// No name anywhere, with an empty body, is [keyfunc.ErrNoKey]. A name
// longer than [MaxAccountLen] bytes or not UTF-8, a body that is not empty
// but holds no name where a body source looks (with no name in any other
// source either), two sources, fields or values naming different accounts
// (see the package documentation), an oversized or malformed body and a
// multipart body are errors wrapping [keyfunc.ErrInvalidKey], whose
// messages never quote the input. Account panics only for invalid
// options, at construction.
func Account(opts ...Option) keyfunc.Func {
	c := newConfig(opts, "username", "email")
	return func(r keyfunc.Request) (string, error) { return c.key(r, account) }
}

// AccountKey returns the key that Account(opts...) gives a request naming
// the account: the same normalisation, [Secret] and [Cleartext]. Sources
// in opts are ignored. Apps use it to name an account's bucket, for
// example to reset its limit after a successful login; with
// Cleartext(true) it returns the normalised name. A name longer than
// [MaxAccountLen] bytes, not UTF-8 or empty after trimming is an error
// wrapping [keyfunc.ErrInvalidKey].
func AccountKey(name string, opts ...Option) (string, error) {
	c := newConfig(opts)
	n, err := normalizeAccount(strings.TrimSpace(name))
	if err != nil {
		return "", err
	}
	return c.finish(n), nil
}

// dropIgnorable returns s without its default-ignorable code points.
func dropIgnorable(s string) string {
	if !strings.ContainsFunc(s, isIgnorable) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isIgnorable(r) {
			return -1
		}
		return r
	}, s)
}

// isIgnorable reports whether r is a default-ignorable code point.
func isIgnorable(r rune) bool { return r >= 0xad && unicode.Is(defaultIgnorable, r) }

// defaultIgnorable is Unicode's Default_Ignorable_Code_Point property
// (DerivedCoreProperties.txt, Unicode 15): code points that are
// invisible where they are not supported (soft hyphen, zero-width space
// and joiners, word joiner, bidi controls, variation selectors, Hangul
// fillers, tags), which NFKC_Casefold removes.
var defaultIgnorable = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x00ad, Hi: 0x00ad, Stride: 1},
		{Lo: 0x034f, Hi: 0x034f, Stride: 1},
		{Lo: 0x061c, Hi: 0x061c, Stride: 1},
		{Lo: 0x115f, Hi: 0x1160, Stride: 1},
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1},
		{Lo: 0x180b, Hi: 0x180f, Stride: 1},
		{Lo: 0x200b, Hi: 0x200f, Stride: 1},
		{Lo: 0x202a, Hi: 0x202e, Stride: 1},
		{Lo: 0x2060, Hi: 0x206f, Stride: 1},
		{Lo: 0x3164, Hi: 0x3164, Stride: 1},
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1},
		{Lo: 0xfeff, Hi: 0xfeff, Stride: 1},
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1},
		{Lo: 0xfff0, Hi: 0xfff8, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x1bca0, Hi: 0x1bca3, Stride: 1},
		{Lo: 0x1d173, Hi: 0x1d17a, Stride: 1},
		{Lo: 0xe0000, Hi: 0xe0fff, Stride: 1},
	},
}

// normalizeAccount returns the form under which an account name is
// counted.
func normalizeAccount(raw string) (string, error) {
	if len(raw) > MaxAccountLen {
		return "", errAccountTooLong
	}
	if !utf8.ValidString(raw) {
		return "", errAccountUTF8
	}
	// Normalised again after folding, and trimmed last: NFKC can turn a
	// character into a space and a combining mark (¯ is " \u0304"), so
	// that a name trimmed first would not be a fixed point. Lowered after
	// folding: x/text's Fold swaps Cherokee's two cases (Ꭹ and ꭹ fold to
	// each other), where Lower settles both on one. Default-ignorable
	// code points are dropped first, as NFKC_Casefold drops them, and
	// again after (NFKC maps U+3164 to U+1160, both ignorable), before a
	// last NFKC: dropping U+034F can leave marks to reorder.
	n := dropIgnorable(norm.NFKC.String(raw))
	n = dropIgnorable(norm.NFKC.String(cases.Lower(language.Und).String(cases.Fold().String(n))))
	n = strings.TrimSpace(norm.NFKC.String(n))
	if n == "" {
		return "", errAccountEmpty
	}
	return n, nil
}
