package personal

import (
	"fmt"
	"strings"
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
	errAccountTooLong  = withReason(fmt.Errorf("personal: account: longer than %d bytes: %w", MaxAccountLen, keyfunc.ErrInvalidKey), "invalid account name")
	errAccountUTF8     = withReason(fmt.Errorf("personal: account: not valid UTF-8: %w", keyfunc.ErrInvalidKey), "invalid account name")
	errAccountEmpty    = withReason(fmt.Errorf("personal: account: empty name: %w", keyfunc.ErrInvalidKey), "invalid account name")
	errAccountNone     = withReason(fmt.Errorf("personal: account: request body holds no account name: %w", keyfunc.ErrInvalidKey), "no account name in request")
	errAccountConflict = withReason(fmt.Errorf("personal: account: request names different accounts: %w", keyfunc.ErrInvalidKey), "conflicting account names in request")
)

var account = &target{
	errNone:     errAccountNone,
	errConflict: errAccountConflict,
	normalize:   func(_ *config, raw string) (string, error) { return normalizeAccount(raw) },
}

// Account keys requests by the account a login names, for login
// anti-bruteforce: failures are counted per account whatever address they
// come from. The name is normalised (Unicode NFKC, trimmed, case-folded),
// so "  Alice@Example.COM " and "alice@example.com" are one account, and
// the key is its [Pseudonym] unless [Cleartext] is set.
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
	// each other), where Lower settles both on one.
	n := strings.TrimSpace(norm.NFKC.String(cases.Lower(language.Und).String(cases.Fold().String(norm.NFKC.String(raw)))))
	if n == "" {
		return "", errAccountEmpty
	}
	return n, nil
}
