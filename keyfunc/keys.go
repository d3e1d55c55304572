package keyfunc

import (
	"errors"
	"fmt"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
)

// MaxValueLen is the longest header or query value, in bytes, that
// [Header], [Query] and [AppKey] take from a request as a key. A longer
// value is an error wrapping [ErrInvalidKey] (400 Bad Request), so a
// client cannot make a key function copy or hash unbounded input. It
// bounds what is read, not what is stored: the limiter stores keys of at
// most 128 bytes as they are and hashes longer ones (SHA-256).
const MaxValueLen = 4096

// Header keys requests by the first value of the named header. An absent
// or empty header is [ErrNoKey]; a value longer than [MaxValueLen] is an
// error wrapping [ErrInvalidKey]. The value is used as sent, so only key by
// a header that the client cannot choose freely or that you verify.
func Header(name string) Func {
	name = textproto.CanonicalMIMEHeaderKey(name)
	tooLong := withReason(fmt.Errorf("ratekit: keyfunc: header %.64q: value longer than %d bytes: %w", name, MaxValueLen, ErrInvalidKey), "key too long")
	return func(r Request) (string, error) {
		return bounded(r.Header(name), tooLong)
	}
}

// Query keys requests by the first value of the named query parameter. An
// absent or empty parameter is [ErrNoKey]; a value longer than [MaxValueLen]
// is an error wrapping [ErrInvalidKey].
func Query(name string) Func {
	tooLong := withReason(fmt.Errorf("ratekit: keyfunc: query %.64q: value longer than %d bytes: %w", name, MaxValueLen, ErrInvalidKey), "key too long")
	return func(r Request) (string, error) {
		return bounded(r.Query(name), tooLong)
	}
}

func bounded(v string, tooLong error) (string, error) {
	switch {
	case v == "":
		return "", ErrNoKey
	case len(v) > MaxValueLen:
		return "", tooLong
	}
	return v, nil
}

// AppKeyOption configures [AppKey].
type AppKeyOption func(*appKeyConfig)

type appKeyConfig struct {
	header, query string
}

// AppKeyHeader sets the header that carries the application key;
// "X-API-Key" by default. "" disables the header source.
func AppKeyHeader(name string) AppKeyOption {
	if name != "" {
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return func(c *appKeyConfig) { c.header = name }
}

// AppKeyQuery sets the query parameter that carries the application key
// when the header is absent; "api_key" by default. "" disables the query
// source.
func AppKeyQuery(name string) AppKeyOption {
	return func(c *appKeyConfig) { c.query = name }
}

// AppKey keys requests by an API (application) key: the X-API-Key header,
// else the api_key query parameter; see [AppKeyHeader] and [AppKeyQuery].
// A request with neither is [ErrNoKey]; a key longer than [MaxValueLen] is an
// error wrapping [ErrInvalidKey].
//
// AppKey does not authenticate the key: pair the limiter with one keyed by
// [ClientIP] or place it after the middleware that checks keys, or clients
// can spread requests over invented keys. AppKey panics if both sources
// are disabled.
func AppKey(opts ...AppKeyOption) Func {
	c := appKeyConfig{header: "X-Api-Key", query: "api_key"}
	for _, o := range opts {
		o(&c)
	}
	if c.header == "" && c.query == "" {
		panic("ratekit: keyfunc: AppKey: both the header and the query source are disabled")
	}
	tooLong := withReason(fmt.Errorf("ratekit: keyfunc: app key: longer than %d bytes: %w", MaxValueLen, ErrInvalidKey), "key too long")
	return func(r Request) (string, error) {
		var v string
		if c.header != "" {
			v = r.Header(c.header)
		}
		if v == "" && c.query != "" {
			v = r.Query(c.query)
		}
		return bounded(v, tooLong)
	}
}

// UserID keys requests by the user ID that lookup returns, typically read
// from the request context that the application's authentication
// middleware filled in. lookup returning false or "" is [ErrNoKey] (an
// anonymous request). UserID panics if lookup is nil.
func UserID(lookup func(Request) (string, bool)) Func {
	if lookup == nil {
		panic("ratekit: keyfunc: UserID: nil lookup")
	}
	return func(r Request) (string, error) {
		id, ok := lookup(r)
		if !ok || id == "" {
			return "", ErrNoKey
		}
		return id, nil
	}
}

// UserIDFrom keys requests by [Request.Value](key): a framework local (gin
// c.Set, echo c.Set, fiber c.Locals) or a request context value. The value
// may be a string, a [fmt.Stringer] or an integer. A missing, nil or empty
// value is [ErrNoKey]; a value of another type is an error (a programming
// error, reported rather than silently skipping the limit).
func UserIDFrom(key any) Func {
	return func(r Request) (string, error) {
		var id string
		switch v := r.Value(key).(type) {
		case nil:
			return "", ErrNoKey
		case string:
			id = v
		case int:
			id = strconv.Itoa(v)
		case int64:
			id = strconv.FormatInt(v, 10)
		case int32:
			id = strconv.FormatInt(int64(v), 10)
		case uint:
			id = strconv.FormatUint(uint64(v), 10)
		case uint64:
			id = strconv.FormatUint(v, 10)
		case uint32:
			id = strconv.FormatUint(uint64(v), 10)
		case fmt.Stringer:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				return "", ErrNoKey
			}
			id = v.String()
		default:
			return "", fmt.Errorf("ratekit: keyfunc: user id: value of type %T is not a string, fmt.Stringer or integer", v)
		}
		if id == "" {
			return "", ErrNoKey
		}
		return id, nil
	}
}

// errNoRoute is Route's error for a request view without a route pattern.
var errNoRoute = errors.New("ratekit: keyfunc: route: the request has no route pattern, only a path " +
	"(a limiter outside the router, or no route matched)")

// Route keys requests by endpoint, to limit an endpoint as a whole: the
// route pattern as it was registered, such as "/users/:id". The request
// method is never added to it, so a client cannot pick its bucket by its
// choice of method: a route that accepts several methods (a net/http
// ServeMux pattern without a method such as "/login", which takes any
// method token, made-up ones included; gin Any, echo Any, fiber All) is
// one bucket whatever method is sent. A ServeMux pattern that names its
// method, such as "POST /login" or "GET /users/{id}" (which also matches
// HEAD requests, under the same key), is the key as it is. Routes of
// one pattern registered separately for different methods (gin
// r.GET("/x") and r.POST("/x")) share their key under one limiter:
// give each its own limiter, or join a key of your own, to limit them
// apart. Combine Route with [Join] to limit each client per endpoint.
//
// The key is never the request path: keyed by "/users/7", every ID would
// have a bucket of its own, and a client could dodge the limit by changing
// the ID. A request whose view has no route pattern is therefore an error,
// not [ErrNoKey]: [FromHTTP] with route "" (net/http middleware around a
// whole ServeMux, where r.Pattern is still empty), a request that no route
// matched, or a [Request] whose Route is "". ErrNoKey would make the
// middleware skip the limit, silently; an error is answered with 400 Bad
// Request on every such request, so the mistake shows at once. Attach the
// limiter inside the router (per route or group), or tell the adapter the
// route.
func Route() Func {
	return func(r Request) (string, error) {
		route := r.Route()
		if route == "" {
			return "", errNoRoute
		}
		return route, nil
	}
}

// Join keys requests by several key functions at once, for example the
// client IP per route. The parts are joined with "|", and "|" and "\"
// inside a part are escaped with "\", so different parts never give the
// same key: ("a|b", "c") and ("a", "b|c") stay apart.
//
// A part that has no key ([ErrNoKey]) is left empty, so the others still
// key the request: Join(ClientIP(), UserIDFrom(userKey{})) limits each
// signed-in user per address and anonymous callers per address
// ("192.0.2.1|"), never not at all. Only when no part has a key is the
// result ErrNoKey. Any other error of a part (a malformed key source) is
// returned as it is, the first one in order. Join panics if fs is empty or
// holds a nil function.
func Join(fs ...Func) Func {
	if len(fs) == 0 {
		panic("ratekit: keyfunc: Join: no key functions")
	}
	for i, f := range fs {
		if f == nil {
			panic(fmt.Sprintf("ratekit: keyfunc: Join: key function %d is nil", i))
		}
	}
	fs = append([]Func(nil), fs...)
	return func(r Request) (string, error) {
		var b strings.Builder
		keyed := false
		for i, f := range fs {
			k, err := f(r)
			switch {
			case err == nil:
				keyed = true
			case errors.Is(err, ErrNoKey):
				k = ""
			default:
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			writeEscaped(&b, k)
		}
		if !keyed {
			return "", ErrNoKey
		}
		return b.String(), nil
	}
}

func writeEscaped(b *strings.Builder, s string) {
	for {
		i := strings.IndexAny(s, `|\`)
		if i < 0 {
			b.WriteString(s)
			return
		}
		b.WriteString(s[:i])
		b.WriteByte('\\')
		b.WriteByte(s[i])
		s = s[i+1:]
	}
}
