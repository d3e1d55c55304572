package keyfunc

import (
	"fmt"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// AccountOption configures [Account].
type AccountOption func(*accountConfig)

type accountConfig struct {
	fields
	secret    []byte
	cleartext bool
}

// MaxAccountLen bounds an account name; a longer one is an error wrapping
// [ErrInvalidKey].
const MaxAccountLen = 320

var (
	errAccountTooLong = withReason(fmt.Errorf("keyfunc: account: longer than %d bytes: %w", MaxAccountLen, ErrInvalidKey), "invalid account name")
	errAccountUTF8    = withReason(fmt.Errorf("keyfunc: account: not valid UTF-8: %w", ErrInvalidKey), "invalid account name")
)

// AccountField adds a field of a JSON object or form body as a source of
// the account name, read as [PhoneJSON] and [PhoneForm] read theirs.
// Sources are tried in the order given; giving any source replaces the
// default ones (see [Account]).
func AccountField(name string) AccountOption {
	return func(c *accountConfig) {
		c.sources = append(c.sources, source{srcJSON, name}, source{srcForm, name})
	}
}

// AccountHeader adds a header as a source of the account name. Sources are
// tried in the order given; giving any source replaces the default ones.
func AccountHeader(name string) AccountOption {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(c *accountConfig) { c.sources = append(c.sources, source{srcHeader, name}) }
}

// AccountSecret sets the secret keying the HMAC under which account names
// are stored (see [Pseudonym]); a fixed public key by default.
func AccountSecret(secret []byte) AccountOption {
	return func(c *accountConfig) { c.secret = secret }
}

// AccountCleartext makes [Account] return the normalised name itself
// rather than its pseudonym; off by default.
func AccountCleartext(on bool) AccountOption {
	return func(c *accountConfig) { c.cleartext = on }
}

// AccountMaxBody sets the most bytes of the request body that [Account]
// reads; [DefaultMaxBody] by default. It panics if n < 1.
func AccountMaxBody(n int64) AccountOption {
	if n < 1 {
		panic(fmt.Sprintf("keyfunc: AccountMaxBody: %d is not positive", n))
	}
	return func(c *accountConfig) { c.maxBody = n }
}

// Account keys requests by the account a login names, so that failures
// are counted per account whatever address they come from. The name is
// normalised by [NormalizeAccount] ("  Alice@Example.COM " and
// "alice@example.com" are one account) and stored as its [Pseudonym]
// unless [AccountCleartext] is set.
//
// By default the name is the "username" field, else the "email" field, of
// a JSON object or form body; bodies are read through [Request.Body],
// which leaves them readable for the handler. No name is [ErrNoKey]; an
// oversized or malformed body or name is an error wrapping
// [ErrInvalidKey].
func Account(opts ...AccountOption) Func {
	c := &accountConfig{fields: fields{maxBody: DefaultMaxBody}}
	for _, o := range opts {
		o(c)
	}
	if len(c.sources) == 0 {
		AccountField("username")(c)
		AccountField("email")(c)
	}
	return func(r Request) (string, error) {
		raw, err := c.find(r)
		if err != nil {
			return "", err
		}
		name, err := normalizeAccount(raw)
		if err != nil || c.cleartext {
			return name, err
		}
		return Pseudonym(c.secret, name), nil
	}
}

// NormalizeAccount returns the form under which [Account] counts an
// account name: Unicode NFKC, trimmed, case-folded. It returns "" for a
// name that [Account] rejects.
func NormalizeAccount(name string) string {
	n, err := normalizeAccount(name)
	if err != nil {
		return ""
	}
	return n
}

// AccountKey returns the key [Account] with secret (nil for the default)
// gives the account name, for example to reset its limit after a
// successful login.
func AccountKey(secret []byte, name string) string {
	return Pseudonym(secret, NormalizeAccount(name))
}

func normalizeAccount(raw string) (string, error) {
	if len(raw) > MaxAccountLen {
		return "", errAccountTooLong
	}
	if !utf8.ValidString(raw) {
		return "", errAccountUTF8
	}
	n := cases.Fold().String(norm.NFKC.String(strings.TrimSpace(raw)))
	if n == "" {
		return "", ErrNoKey
	}
	return n, nil
}
