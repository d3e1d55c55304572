package personal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/ratekit/ratekit/keyfunc"
)

// target is what a key function looks for in a request: a phone number or
// an account name.
type target struct {
	// errNone is the answer for a non-empty body that holds no value
	// where no other source holds one either.
	errNone error
	// errConflict is the answer when handlers reading the request in
	// different ways would see different values.
	errConflict error
	// normalize returns the form under which a value is counted.
	normalize func(c *config, raw string) (string, error)
}

var (
	errJSONType  = withReason(fmt.Errorf("ratekit: personal: json field is not a string or number: %w", keyfunc.ErrInvalidKey), "malformed request body")
	errJSON      = withReason(fmt.Errorf("ratekit: personal: body is not a json object: %w", keyfunc.ErrInvalidKey), "malformed request body")
	errMultipart = withReason(fmt.Errorf("ratekit: personal: multipart bodies are not supported: %w", keyfunc.ErrInvalidKey), "unsupported request body")
)

// key returns the key for the value t finds in r: every source is read,
// and every value found, in any source, in any field that a binder would
// take for the one named, and every repetition of it, must name the same
// thing once normalised; otherwise the request is refused with
// t.errConflict, since a handler may read any of them. A request with no
// value anywhere is [keyfunc.ErrNoKey], or t.errNone when its body is not
// empty and a body source read it: the value may be in the body in a
// shape that this package does not read, and skipping the limit then
// would let it be bypassed.
func (c *config) key(r keyfunc.Request, t *target) (string, error) {
	l := lookup{c: c, t: t, r: r}
	var first, norm string // the first value found, and its normal form
	for _, s := range c.sources {
		vals, err := l.values(s)
		if err != nil {
			return "", err
		}
		for _, v := range vals {
			v = strings.TrimSpace(v)
			switch {
			case v == "" || v == first:
				continue
			case first == "":
				if norm, err = t.normalize(c, v); err != nil {
					return "", err
				}
				first = v
				continue
			}
			if n, err := t.normalize(c, v); err != nil || n != norm {
				return "", t.errConflict
			}
		}
	}
	if first == "" {
		if len(l.text) > 0 {
			return "", t.errNone
		}
		return "", keyfunc.ErrNoKey
	}
	return c.finish(norm), nil
}

// finish turns a normalised value into the key.
func (c *config) finish(v string) string {
	if c.cleartext {
		return v
	}
	return Pseudonym(c.secret, v)
}

// lookup is one key function call's view of a request. The body is read
// once, when a body source first needs it, and parsed at most once each
// way.
type lookup struct {
	c *config
	t *target
	r keyfunc.Request

	read bool
	body []byte // as sent
	text []byte // body without leading JSON white space; empty if blank
	mt   string // media type of the body

	jsonDone bool
	jsonErr  error
	jsonKV   []jsonPair

	formDone bool
	formKV   []formPair
}

type jsonPair struct {
	key string
	raw json.RawMessage
}

type formPair struct{ key, value string }

// jsonSpace is white space as JSON defines it.
const jsonSpace = " \t\r\n"

// values returns the raw values of one source: every value that a
// handler reading it might take.
func (l *lookup) values(s source) ([]string, error) {
	switch s.kind {
	case srcHeader:
		return l.r.Values(s.name), nil
	case srcQuery:
		return l.queryValues(s.name), nil
	case srcJSON:
		return l.jsonValues(s.name)
	}
	return l.formValues(s.name)
}

// queryValues returns the values of query parameter name: the first, as
// the framework parses the query (Request.Query), and every parameter
// whose name is name in any case (echo's binder falls back to one), as
// url.ParseQuery parses the whole query string when the view gives it
// (keyfunc.RawQuerier).
func (l *lookup) queryValues(name string) []string {
	vals := []string{l.r.Query(name)}
	if rq, ok := l.r.(keyfunc.RawQuerier); ok {
		for _, p := range parseForm(rq.RawQuery()) {
			if strings.EqualFold(p.key, name) {
				vals = append(vals, p.value)
			}
		}
	}
	return vals
}

// readBody reads the body once. A body the request cannot provide (gRPC,
// whose Body returns an error wrapping [keyfunc.ErrNoKey]) is empty.
func (l *lookup) readBody() error {
	if l.read {
		return nil
	}
	l.read = true
	body, err := l.r.Body(l.c.maxBody)
	switch {
	case errors.Is(err, keyfunc.ErrNoKey):
		return nil
	case err != nil:
		return err
	}
	l.body = body
	l.text = bytes.TrimLeft(body, jsonSpace)
	l.mt = mediaType(l.r.Header("Content-Type"))
	return nil
}

// jsonValues returns the values of field name in a JSON object body.
func (l *lookup) jsonValues(name string) ([]string, error) {
	if err := l.readBody(); err != nil {
		return nil, err
	}
	switch {
	case len(l.text) == 0:
		return nil, nil
	case isMultipart(l.mt):
		// A multipart body may open with a preamble that looks like
		// JSON; its parts are what form parsers see.
		return nil, errMultipart
	case l.text[0] != '{':
		if isJSONType(l.mt) {
			return nil, errJSON
		}
		return nil, nil
	}
	if !l.jsonDone {
		l.jsonDone = true
		l.jsonKV, l.jsonErr = parseJSONObject(l.text)
	}
	if l.jsonErr != nil {
		return nil, l.jsonErr
	}
	return jsonFields(l.jsonKV, name)
}

// formValues returns the values of field name in a form body: every
// field whose name is name in any case (echo's binder falls back to one
// when the exact name is missing), each repetition.
func (l *lookup) formValues(name string) ([]string, error) {
	if err := l.readBody(); err != nil {
		return nil, err
	}
	switch {
	case len(l.text) == 0:
		return nil, nil
	case isMultipart(l.mt):
		return nil, errMultipart
	case !strings.EqualFold(l.mt, "application/x-www-form-urlencoded"):
		return nil, nil
	}
	// A form-labelled body is parsed as a form even when it also reads
	// as a JSON object: form parsers go by the label, and what they see
	// must agree with what the JSON source sees.
	if !l.formDone {
		l.formDone = true
		l.formKV = parseForm(string(l.body))
	}
	var vals []string
	for _, p := range l.formKV {
		if strings.EqualFold(p.key, name) {
			vals = append(vals, p.value)
		}
	}
	return vals, nil
}

// parseForm splits a URL-encoded form as url.ParseQuery does, dropping
// the pairs it would drop (with ';' or a bad escape).
func parseForm(s string) []formPair {
	var kv []formPair
	for s != "" {
		var pair string
		pair, s, _ = strings.Cut(s, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		v, err = url.QueryUnescape(v)
		if err != nil {
			continue
		}
		kv = append(kv, formPair{k, v})
	}
	return kv
}

// parseJSONObject returns the top-level members of the JSON object that
// body starts with; data after the object is ignored, as
// json.NewDecoder(r.Body).Decode ignores it.
func parseJSONObject(body []byte) ([]jsonPair, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errJSON
	}
	var kv []jsonPair
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, errJSON
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, errJSON
		}
		kv = append(kv, jsonPair{key, raw})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, errJSON
	}
	return kv, nil
}

// jsonFields returns the values of every member of kv whose key is name,
// exactly or in another case: encoding/json decodes any of them into a
// string field called name (the last one wins), and another decoder may
// take another. null is no value; a number counts as its text.
func jsonFields(kv []jsonPair, name string) ([]string, error) {
	var vals []string
	for _, p := range kv {
		if p.key != name && !strings.EqualFold(p.key, name) {
			continue
		}
		switch c := p.raw[0]; {
		case c == '"':
			var v string
			if err := json.Unmarshal(p.raw, &v); err != nil {
				return nil, errJSON
			}
			vals = append(vals, v)
		case c == '-' || '0' <= c && c <= '9':
			vals = append(vals, string(p.raw))
		case c == 'n':
		default:
			return nil, errJSONType
		}
	}
	return vals, nil
}

// mediaType returns the media type of a Content-Type value, without
// parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.Trim(ct, " \t")
}

// isJSONType reports whether mt is application/json or a +json type.
func isJSONType(mt string) bool {
	return strings.EqualFold(mt, "application/json") ||
		len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")
}

// isMultipart reports whether mt is a multipart type.
func isMultipart(mt string) bool {
	return len(mt) >= 10 && strings.EqualFold(mt[:10], "multipart/")
}
