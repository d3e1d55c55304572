package keyfunc

import (
	"fmt"
	"net/textproto"
	"strings"
	"unicode"

	"github.com/nyaruka/phonenumbers"
)

// PhoneOption configures [Phone].
type PhoneOption func(*phoneConfig)

type phoneConfig struct {
	fields
	region    string
	secret    []byte
	cleartext bool
}

// DefaultMaxBody is the default for [MaxBody]: the most [Phone] reads of a
// request body.
const DefaultMaxBody = 64 << 10

// maxPhoneLen bounds the input handed to phonenumbers; it refuses longer
// strings itself.
const maxPhoneLen = phonenumbers.MAX_INPUT_STRING_LENGTH

var (
	errPhoneInvalid = withReason(fmt.Errorf("keyfunc: phone: not a valid phone number: %w", ErrInvalidKey), "invalid phone number")
	errPhoneTooLong = withReason(fmt.Errorf("keyfunc: phone: longer than %d bytes: %w", maxPhoneLen, ErrInvalidKey), "invalid phone number")
)

// PhoneHeader adds a header as a source of the phone number. Sources are
// tried in the order given and the first that holds a number is used;
// giving any source replaces the default ones (see [Phone]).
func PhoneHeader(name string) PhoneOption {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(c *phoneConfig) { c.sources = append(c.sources, source{srcHeader, name}) }
}

// PhoneForm adds a field of an application/x-www-form-urlencoded body as a
// source of the phone number, read like [http.Request.PostFormValue]: only
// when the Content-Type says so. A multipart/form-data body is not
// supported and is an error wrapping [ErrInvalidKey], so that it cannot be
// used to slip past the limit. Sources are tried in the order given; giving
// any source replaces the default ones.
func PhoneForm(field string) PhoneOption {
	return func(c *phoneConfig) { c.sources = append(c.sources, source{srcForm, field}) }
}

// PhoneJSON adds a top-level field of a JSON object body as a source of the
// phone number. The value may be a string or a number. The field name is
// matched as encoding/json matches struct fields: case-insensitively, the
// last match winning. The body is read whenever it holds a JSON object,
// whatever its Content-Type, because common decoders
// (json.NewDecoder(r.Body), gin's ShouldBindJSON) ignore the header; it is
// skipped when the Content-Type is a form. Sources are tried in the order
// given; giving any source replaces the default ones.
func PhoneJSON(field string) PhoneOption {
	return func(c *phoneConfig) { c.sources = append(c.sources, source{srcJSON, field}) }
}

// PhoneQuery adds a query parameter as a source of the phone number.
// Sources are tried in the order given; giving any source replaces the
// default ones.
func PhoneQuery(name string) PhoneOption {
	return func(c *phoneConfig) { c.sources = append(c.sources, source{srcQuery, name}) }
}

// DefaultRegion sets the region (ISO 3166-1 alpha-2, such as "CN" or "US")
// assumed for numbers written without a country code. None by default:
// then numbers must carry their country code. DefaultRegion panics if the
// region is unknown to phonenumbers; "" means none.
func DefaultRegion(region string) PhoneOption {
	region = strings.ToUpper(region)
	if region != "" && !phonenumbers.GetSupportedRegions()[region] {
		panic(fmt.Sprintf("keyfunc: DefaultRegion: unknown region %.16q", region))
	}
	return func(c *phoneConfig) { c.region = region }
}

// MaxBody sets the most bytes of the request body that [Phone] reads;
// [DefaultMaxBody] (64 KiB) by default. A longer body is an error wrapping
// [ErrInvalidKey]. MaxBody panics if n < 1.
func MaxBody(n int64) PhoneOption {
	if n < 1 {
		panic(fmt.Sprintf("keyfunc: MaxBody: %d is not positive", n))
	}
	return func(c *phoneConfig) { c.maxBody = n }
}

// Phone keys requests by a phone number, normalised to E.164 so that every
// way of writing one number gives one key: with DefaultRegion("CN"),
// "+86 138-0013-8000", "8613800138000" and "13800138000" are all
// "+8613800138000". A number without "+" that is not valid in the default
// region is retried as international, so a number written with its
// country code but without the plus is understood.
//
// By default the number is the "phone" field of a JSON object body, else
// of a form body, else the "phone" query parameter (the places where
// common handlers, such as those using [http.Request.FormValue], find it).
// [PhoneHeader], [PhoneForm], [PhoneJSON] and [PhoneQuery] choose other
// sources. Bodies are read through [Request.Body], which leaves them
// readable for the handler, up to [MaxBody].
//
// No number in any source is [ErrNoKey]. A number that does not parse or
// is not valid ([phonenumbers.IsValidNumber]), an oversized or malformed
// body, and a multipart body with a form source are errors wrapping
// [ErrInvalidKey]; their messages never quote the input. Phone panics
// only for invalid options, at construction.
func Phone(opts ...PhoneOption) Func {
	c := &phoneConfig{fields: fields{maxBody: DefaultMaxBody}}
	for _, o := range opts {
		o(c)
	}
	if len(c.sources) == 0 {
		c.sources = []source{{srcJSON, "phone"}, {srcForm, "phone"}, {srcQuery, "phone"}}
	}
	return func(r Request) (string, error) {
		raw, err := c.find(r)
		if err != nil {
			return "", err
		}
		e164, err := c.normalize(raw)
		if err != nil || c.cleartext {
			return e164, err
		}
		return Pseudonym(c.secret, e164), nil
	}
}

// PhoneSecret sets the secret keying the HMAC under which phone numbers
// are stored (see [Pseudonym]). Without it a fixed, public key is used:
// a dump of the store shows no numbers, but a number can be tested
// against it; set an app secret, the same on every instance, to prevent
// that.
func PhoneSecret(secret []byte) PhoneOption {
	return func(c *phoneConfig) { c.secret = secret }
}

// PhoneCleartext makes [Phone] return the E.164 number itself rather
// than its pseudonym; off by default. Use it only where the store may
// hold personal data.
func PhoneCleartext(on bool) PhoneOption {
	return func(c *phoneConfig) { c.cleartext = on }
}

// normalize parses raw and formats it as E.164.
func (c *phoneConfig) normalize(raw string) (string, error) {
	if len(raw) > maxPhoneLen {
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
		return "", withReason(fmt.Errorf("keyfunc: phone: %w: %w", err, ErrInvalidKey), "invalid phone number")
	}
	return "", errPhoneInvalid
}
