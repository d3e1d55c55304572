package personal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// defaultSecret keys [Pseudonym] when the app sets no secret. It is public:
// it keeps personal data out of a store dump, not out of a guess. It must
// not change: stored keys are named with it.
var defaultSecret = []byte("ratekit/keyfunc pseudonym v1")

// PseudonymPrefix starts every key [Pseudonym] returns.
const PseudonymPrefix = "p:"

// Pseudonym returns the key under which a personal value (a phone number,
// an account name) is stored: "p:" and the base64url HMAC-SHA256 of the
// value under secret, cut to 128 bits. Equal values give equal keys, so
// limits work as on the value itself, but a dump of Redis reveals no
// numbers or names. With a nil secret a fixed public key is used; set an
// app secret (the same on every instance) so that values cannot be tested
// against the store either.
//
// [Phone] and [Account] return pseudonyms by default. Pseudonym takes the
// value as is; [PhoneKey] and [AccountKey] normalise it first, as [Phone]
// and [Account] do.
func Pseudonym(secret []byte, value string) string {
	if secret == nil {
		secret = defaultSecret
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(value))
	var sum [sha256.Size]byte
	return PseudonymPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:16])
}
