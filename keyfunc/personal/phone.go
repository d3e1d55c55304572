package personal

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/nyaruka/phonenumbers"
	"github.com/ratekit/ratekit/keyfunc"
)

// maxPhoneLen bounds the input handed to phonenumbers; it refuses longer
// strings itself.
const maxPhoneLen = phonenumbers.MAX_INPUT_STRING_LENGTH

var (
	errPhoneInvalid  = withReason(fmt.Errorf("ratekit: personal: phone: not a valid phone number: %w", keyfunc.ErrInvalidKey), "invalid phone number")
	errPhoneTooLong  = withReason(fmt.Errorf("ratekit: personal: phone: longer than %d bytes: %w", maxPhoneLen, keyfunc.ErrInvalidKey), "invalid phone number")
	errPhoneNone     = withReason(fmt.Errorf("ratekit: personal: phone: request body holds no phone number: %w", keyfunc.ErrInvalidKey), "no phone number in request")
	errPhoneConflict = withReason(fmt.Errorf("ratekit: personal: phone: request names different phone numbers: %w", keyfunc.ErrInvalidKey), "conflicting phone numbers in request")
)

var phone = &target{
	errNone:     errPhoneNone,
	errConflict: errPhoneConflict,
	normalize:   normalizePhone,
}

// Phone keys requests by a phone number, for SMS and verification-code
// throttling. The number is normalised to E.164, so that every way of
// writing one number gives one key: with DefaultRegion("CN"),
// "+86 138-0013-8000", "8613800138000" and "13800138000" are all
// "+8613800138000". A number without "+" that is not valid in the default
// region is retried as international, so a number written with its
// country code but without the plus is understood. The key is the
// number's [Pseudonym] unless [Cleartext] is set.
//
// By default the number is read from [Field]("phone"): the "phone" field
// of a JSON object body, of a form body, or the query. [Header], [JSON],
// [Form], [Query] and [Field] choose other sources. Bodies are read
// through [keyfunc.Request.Body], which leaves them readable for the
// handler, up to [MaxBody] bytes.
//
// No number anywhere, with an empty body, is [keyfunc.ErrNoKey]. These
// are errors wrapping [keyfunc.ErrInvalidKey], whose messages never quote
// the input:
//   - a number that does not parse or is not valid
//     ([phonenumbers.IsValidNumber]);
//   - a body that is not empty but holds no number where a body source
//     looks, with no number in any other source either;
//   - two sources, fields or values naming different numbers: a JSON body
//     and the query, the query and a form body, "phone=A&phone=B" (see the
//     package documentation);
//   - an oversized or malformed body, and a multipart body.
//
// Phone panics only for invalid options, at construction.
func Phone(opts ...Option) keyfunc.Func {
	c := newConfig(opts, "phone")
	return func(r keyfunc.Request) (string, error) { return c.key(r, phone) }
}

// PhoneKey returns the key that Phone(opts...) gives a request carrying
// number: the same normalisation, [Secret] and [Cleartext]. Sources in
// opts are ignored. Ops tools use it to name a number's bucket, for
// example to reset its limit. An invalid number is an error wrapping
// [keyfunc.ErrInvalidKey].
func PhoneKey(number string, opts ...Option) (string, error) {
	c := newConfig(opts)
	e164, err := normalizePhone(c, strings.TrimSpace(number))
	if err != nil {
		return "", err
	}
	return c.finish(e164), nil
}

// normalizePhone parses raw and formats it as E.164.
func normalizePhone(c *config, raw string) (string, error) {
	switch {
	case raw == "":
		return "", errPhoneInvalid
	case len(raw) > maxPhoneLen:
		return "", errPhoneTooLong
	}
	// phonenumbers reads letters as keypad digits ("1-800-FLOWERS"); a
	// number typed into a form has none, and accepting them would let one
	// number take many spellings that look distinct to a reviewer.
	// An extension ("ext. 12", "x12") may follow the number.
	// An RFC 3966 "tel:" URI is accepted too.
	number := strings.ToLower(raw)
	number = strings.TrimPrefix(number, "tel:")
	if i := strings.Index(number, "ext"); i >= 0 {
		number = number[:i]
	}
	if i := strings.IndexAny(number, "x#;"); i >= 0 {
		number = number[:i]
	}
	if strings.ContainsFunc(number, unicode.IsLetter) {
		return "", errPhoneInvalid
	}
	num, err := phonenumbers.Parse(raw, c.region)
	if err == nil && phonenumbers.IsValidNumber(num) {
		return phonenumbers.Format(num, phonenumbers.E164), nil
	}
	if '0' <= raw[0] && raw[0] <= '9' {
		// Written with its country code but without the plus.
		if num2, err2 := phonenumbers.Parse("+"+raw, c.region); err2 == nil && phonenumbers.IsValidNumber(num2) {
			return phonenumbers.Format(num2, phonenumbers.E164), nil
		}
	}
	if err != nil {
		return "", withReason(fmt.Errorf("ratekit: personal: phone: %w: %w", err, keyfunc.ErrInvalidKey), "invalid phone number")
	}
	return "", errPhoneInvalid
}
