package keyfunc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Where [Phone] and [Account] look for their value.
type sourceKind uint8

const (
	srcHeader sourceKind = iota
	srcForm
	srcJSON
	srcQuery
)

type source struct {
	kind sourceKind
	name string
}

// fields reads a value from the first of several request sources that
// holds one.
type fields struct {
	sources []source
	maxBody int64
}

var (
	errJSONType  = withReason(fmt.Errorf("keyfunc: json field is not a string or number: %w", ErrInvalidKey), "malformed request body")
	errJSON      = withReason(fmt.Errorf("keyfunc: body is not a json object: %w", ErrInvalidKey), "malformed request body")
	errMultipart = withReason(fmt.Errorf("keyfunc: multipart bodies are not supported: %w", ErrInvalidKey), "unsupported request body")
)

// find returns the trimmed value of the first source that holds one;
// [ErrNoKey] when none does.
func (c *fields) find(r Request) (string, error) {
	for _, s := range c.sources {
		raw, err := c.lookup(r, s)
		if err != nil {
			return "", err
		}
		if raw = strings.TrimSpace(raw); raw != "" {
			return raw, nil
		}
	}
	return "", ErrNoKey
}

// lookup returns the raw value from one source, "" when it has none.
func (c *fields) lookup(r Request, s source) (string, error) {
	switch s.kind {
	case srcHeader:
		return r.Header(s.name), nil
	case srcQuery:
		return r.Query(s.name), nil
	}
	mt := mediaType(r.Header("Content-Type"))
	isForm := strings.EqualFold(mt, "application/x-www-form-urlencoded")
	isMultipart := len(mt) >= 10 && strings.EqualFold(mt[:10], "multipart/")
	if s.kind == srcForm {
		switch {
		case isMultipart:
			return "", errMultipart
		case !isForm:
			return "", nil
		}
		body, err := r.Body(c.maxBody)
		if err != nil {
			return "", err
		}
		return lookupQuery(string(body), s.name), nil
	}
	// srcJSON
	if isForm || isMultipart {
		return "", nil
	}
	body, err := r.Body(c.maxBody)
	if err != nil {
		return "", err
	}
	body = bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(body) == 0:
		return "", nil
	case body[0] != '{':
		if isJSONType(mt) {
			return "", errJSON
		}
		return "", nil
	}
	return jsonField(body, s.name)
}

// jsonField returns the top-level field name of the JSON object in body,
// matched as encoding/json matches struct fields.
func jsonField(body []byte, name string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", errJSON
	}
	var v string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", errJSON
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", errJSON
		}
		if key != name && !strings.EqualFold(key, name) {
			continue
		}
		switch c := raw[0]; {
		case c == '"':
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", errJSON
			}
		case c == '-' || '0' <= c && c <= '9':
			v = string(raw)
		case c == 'n': // null leaves a decoded field unchanged
		default:
			return "", errJSONType
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return "", errJSON
	}
	return v, nil
}

// mediaType returns the media type of a Content-Type value, without
// parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return trimOWS(ct)
}

// isJSONType reports whether mt is application/json or a +json type.
func isJSONType(mt string) bool {
	return strings.EqualFold(mt, "application/json") ||
		len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")
}
