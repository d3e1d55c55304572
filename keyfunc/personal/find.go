package personal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
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
	errJSONType  = withReason(fmt.Errorf("personal: json field is not a string or number: %w", keyfunc.ErrInvalidKey), "malformed request body")
	errJSON      = withReason(fmt.Errorf("personal: body is not a json object: %w", keyfunc.ErrInvalidKey), "malformed request body")
	errMultipart = withReason(fmt.Errorf("personal: multipart bodies are not supported: %w", keyfunc.ErrInvalidKey), "unsupported request body")
)

// key returns the key for the value t finds in r.
func (c *config) key(r keyfunc.Request, t *target) (string, error) {
	l := lookup{c: c, t: t, r: r}
	raw, other, err := l.find()
	if err != nil {
		return "", err
	}
	v, err := t.normalize(c, raw)
	if err != nil {
		return "", err
	}
	if other != "" && other != raw {
		if o, err := t.normalize(c, other); err != nil || o != v {
			return "", t.errConflict
		}
	}
	return c.finish(v), nil
}

// finish turns a normalised value into the key.
func (c *config) finish(v string) string {
	if c.cleartext {
		return v
	}
	return Pseudonym(c.secret, v)
}

// Which handlers see a source. JSON decoders (json.NewDecoder(r.Body),
// gin's ShouldBindJSON) see JSON fields and nothing else; form parsers
// (r.FormValue, gin's and echo's form binders) see form fields and the
// query; headers are read only by code written to read them.
const (
	famHeader = iota
	famJSON
	famForm
)

func (s source) family() int {
	switch s.kind {
	case srcJSON:
		return famJSON
	case srcForm, srcQuery:
		return famForm
	}
	return famHeader
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

// find returns the trimmed value of the first source that holds one and,
// when that source is seen only by JSON decoders or only by form parsers,
// the first value that a later source seen by the other kind of handler
// holds ("" if none): a handler sees one or the other, so the caller
// refuses the request unless the two name the same thing.
//
// With no value anywhere, find returns t.errNone when the body is not
// empty and a body source was read, else [keyfunc.ErrNoKey]: the value may
// be in the body in a shape that this package does not read, and skipping
// the limit then would let it be bypassed.
func (l *lookup) find() (val, other string, err error) {
	srcs := l.c.sources
	i := 0
	for ; i < len(srcs); i++ {
		v, err := l.value(srcs[i])
		if err != nil {
			return "", "", err
		}
		if val = strings.TrimSpace(v); val != "" {
			break
		}
	}
	if val == "" {
		if len(l.text) > 0 {
			return "", "", l.t.errNone
		}
		return "", "", keyfunc.ErrNoKey
	}
	fam := srcs[i].family()
	if fam == famHeader {
		return val, "", nil
	}
	for _, s := range srcs[i+1:] {
		if f := s.family(); f == famHeader || f == fam {
			continue
		}
		v, err := l.value(s)
		if err != nil {
			return "", "", err
		}
		if v = strings.TrimSpace(v); v != "" {
			return val, v, nil
		}
	}
	return val, "", nil
}

// value returns the raw value of one source, "" when it has none.
func (l *lookup) value(s source) (string, error) {
	switch s.kind {
	case srcHeader:
		return l.r.Header(s.name), nil
	case srcQuery:
		return l.r.Query(s.name), nil
	case srcJSON:
		return l.jsonValue(s.name)
	}
	return l.formValue(s.name)
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

// jsonValue returns the value of field name in a JSON object body.
func (l *lookup) jsonValue(name string) (string, error) {
	if err := l.readBody(); err != nil {
		return "", err
	}
	switch {
	case len(l.text) == 0:
		return "", nil
	case isMultipart(l.mt):
		// A multipart body may open with a preamble that looks like
		// JSON; its parts are what form parsers see.
		return "", errMultipart
	case l.text[0] != '{':
		if isJSONType(l.mt) {
			return "", errJSON
		}
		return "", nil
	}
	if !l.jsonDone {
		l.jsonDone = true
		l.jsonKV, l.jsonErr = parseJSONObject(l.text)
	}
	if l.jsonErr != nil {
		return "", l.jsonErr
	}
	return jsonField(l.jsonKV, name)
}

// formValue returns the value of field name in a form body.
func (l *lookup) formValue(name string) (string, error) {
	if err := l.readBody(); err != nil {
		return "", err
	}
	switch {
	case len(l.text) == 0:
		return "", nil
	case isMultipart(l.mt):
		return "", errMultipart
	case !strings.EqualFold(l.mt, "application/x-www-form-urlencoded"):
		return "", nil
	}
	// A form-labelled body is parsed as a form even when it also reads
	// as a JSON object: form parsers go by the label, and what they see
	// must agree with what the JSON source sees (see find).
	if !l.formDone {
		l.formDone = true
		l.formKV = parseForm(string(l.body))
	}
	for _, p := range l.formKV {
		if p.key == name {
			return p.value, nil
		}
	}
	// Form parsers add the query after the body: there the exact name
	// comes before a body field spelt in another case.
	if strings.TrimSpace(l.r.Query(name)) != "" {
		return "", nil
	}
	// echo's binder falls back to a field whose name differs only in
	// case, picking any one of them: their first values must agree.
	var keys []string // the fields matched so far
	var v string
	for _, p := range l.formKV {
		if !strings.EqualFold(p.key, name) || slices.Contains(keys, p.key) {
			continue
		}
		if len(keys) > 0 && p.value != v {
			return "", l.t.errConflict
		}
		keys = append(keys, p.key)
		v = p.value
	}
	return v, nil
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

// jsonField returns the value encoding/json would decode into a string
// field called name: every member whose key matches, exactly or
// case-insensitively, overwrites it, and null leaves it unchanged. A
// number counts as its text.
func jsonField(kv []jsonPair, name string) (string, error) {
	var v string
	for _, p := range kv {
		if p.key != name && !strings.EqualFold(p.key, name) {
			continue
		}
		switch c := p.raw[0]; {
		case c == '"':
			if err := json.Unmarshal(p.raw, &v); err != nil {
				return "", errJSON
			}
		case c == '-' || '0' <= c && c <= '9':
			v = string(p.raw)
		case c == 'n':
		default:
			return "", errJSONType
		}
	}
	return v, nil
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
