package personal

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// DefaultMaxBody is the default for [MaxBody]: the most bytes of a request
// body that [Phone] and [Account] read.
const DefaultMaxBody = 64 << 10

// Option configures [Phone], [Account], [PhoneKey] and [AccountKey]. An
// option that does not apply to one of them, such as [DefaultRegion] for
// [Account], is ignored there.
type Option func(*config)

type config struct {
	sources   []source
	maxBody   int64
	region    string
	secret    []byte
	cleartext bool
}

func newConfig(opts []Option, defaults ...string) *config {
	c := &config{maxBody: DefaultMaxBody}
	for _, o := range opts {
		o(c)
	}
	if len(c.sources) == 0 {
		for _, name := range defaults {
			Field(name)(c)
		}
	}
	return c
}

// sourceKind says where a source looks.
type sourceKind uint8

const (
	srcHeader sourceKind = iota
	srcJSON
	srcForm
	srcQuery
)

type source struct {
	kind sourceKind
	name string
}

// Header adds a request header as a source: every value of it (a
// repeated header line is a second value). Every source given is read,
// and all the values they hold must name one number or account (see the
// package documentation); giving any source replaces the defaults (see
// [Phone] and [Account]).
func Header(name string) Option {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(c *config) { c.sources = append(c.sources, source{srcHeader, name}) }
}

// JSON adds a top-level field of a JSON object body as a source. The
// value may be a string or a number; null is none. The field name is
// matched as encoding/json matches struct fields, exactly or
// case-insensitively, and every member that matches counts (encoding/json
// keeps the last, another decoder may keep the first): all must agree. A
// body that is a JSON object is read whatever its Content-Type
// (application/json, text/plain, a form type or none), because
// json.NewDecoder(r.Body) ignores the header; a body labelled as JSON
// that is not an object is an error wrapping [keyfunc.ErrInvalidKey].
// Giving any source replaces the defaults.
func JSON(field string) Option {
	return func(c *config) { c.sources = append(c.sources, source{srcJSON, field}) }
}

// Form adds a field of an application/x-www-form-urlencoded body as a
// source: every value of every field whose name is the name given in
// any case (net/http and gin read the first value of the exact name,
// echo's binder falls back to a field in another case, "PHONE="), which
// must all agree. A body is parsed as a form when, and only when, its
// Content-Type says so, as form parsers go by the label; if such a body
// also reads as a JSON object, the two readings must not name different
// values (see the package documentation). A multipart/form-data body is
// not supported and is an error wrapping [keyfunc.ErrInvalidKey], so that
// it cannot be used to slip past the limit. Giving any source replaces
// the defaults.
func Form(field string) Option {
	return func(c *config) { c.sources = append(c.sources, source{srcForm, field}) }
}

// Query adds a query parameter as a source: every value of every
// parameter whose name is the name given in any case, which must all
// agree (the whole query is read where the request view gives it,
// keyfunc.RawQuerier, as every ratekit adapter's does). Giving any source
// replaces the defaults.
func Query(name string) Option {
	return func(c *config) { c.sources = append(c.sources, source{srcQuery, name}) }
}

// Field adds [JSON](name), [Form](name) and [Query](name), in that order:
// the places where common binders look for a field (gin's ShouldBind,
// echo's Bind, json.NewDecoder(r.Body), [net/http.Request.FormValue]).
// Giving any source replaces the defaults.
func Field(name string) Option {
	return func(c *config) {
		c.sources = append(c.sources, source{srcJSON, name}, source{srcForm, name}, source{srcQuery, name})
	}
}

// Secret sets the secret keying the HMAC under which values are stored
// (see [Pseudonym]). nil, the default, means a fixed, public key: a dump
// of the store shows no numbers or names, but a value can be tested
// against it. Set an app secret, the same on every instance, to prevent
// that.
func Secret(secret []byte) Option {
	return func(c *config) { c.secret = secret }
}

// Cleartext makes the key the normalised value itself rather than its
// [Pseudonym]; off by default. Use it only where the store may hold
// personal data.
func Cleartext(on bool) Option {
	return func(c *config) { c.cleartext = on }
}

// MaxBody sets the most bytes of the request body that are read;
// [DefaultMaxBody] (64 KiB) by default. A longer body is an error wrapping
// [keyfunc.ErrInvalidKey]. MaxBody panics if n < 1.
func MaxBody(n int64) Option {
	if n < 1 {
		panic(fmt.Sprintf("ratekit: personal: MaxBody: %d is not positive", n))
	}
	return func(c *config) { c.maxBody = n }
}

// DefaultRegion sets the region (ISO 3166-1 alpha-2, such as "CN" or "US")
// assumed for phone numbers written without a country code. None by
// default: then numbers must carry their country code. DefaultRegion
// panics if the region is unknown to phonenumbers; "" means none.
// [Account] and [AccountKey] ignore it.
func DefaultRegion(region string) Option {
	region = strings.ToUpper(region)
	if region != "" && !phonenumbers.GetSupportedRegions()[region] {
		panic(fmt.Sprintf("ratekit: personal: DefaultRegion: unknown region %.16q", region))
	}
	return func(c *config) { c.region = region }
}
