package fiberlimit

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/keyfunc"
)

// request is the keyfunc.Request view of a fiber request. fiber's strings
// and byte slices point into fasthttp buffers that are reused once the
// handler returns, so every method returns a copy: keys outlive the
// request in stores and caches.
type request struct{ c *fiber.Ctx }

var _ keyfunc.Request = request{}

func (r request) Context() context.Context { return r.c.UserContext() }

func (r request) Method() string { return strings.Clone(r.c.Method()) }

// Route is the path of the matched route: for a route-level middleware the
// route's pattern, for middleware mounted with app.Use or app.Group the
// mount prefix, as fiber has not matched the final route yet.
func (r request) Route() string { return strings.Clone(r.c.Route().Path) }

func (r request) Path() string { return strings.Clone(r.c.Path()) }

func (r request) Header(name string) string {
	return string(r.c.Request().Header.Peek(name))
}

func (r request) Values(name string) []string {
	raw := r.c.Request().Header.PeekAll(name)
	if len(raw) == 0 {
		return nil
	}
	vs := make([]string, len(raw))
	for i, b := range raw {
		vs[i] = string(b)
	}
	return vs
}

func (r request) Query(name string) string {
	return string(r.c.Context().QueryArgs().Peek(name))
}

// RemoteAddr is the TCP peer, not c.IP(): fiber's ProxyHeader setting
// would trust a forwarding header from anyone, while keyfunc.ClientIP
// honours them only from trusted proxies.
func (r request) RemoteAddr() string {
	a := r.c.Context().RemoteAddr()
	if t, ok := a.(*net.TCPAddr); ok { // one allocation instead of three
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return a.String()
}

func (r request) Value(key any) any {
	if v := r.c.Locals(key); v != nil {
		return v
	}
	return r.c.UserContext().Value(key)
}

// Body returns a copy of the request body, which fasthttp already holds in
// memory (fiber's BodyLimit bounds its size). The handler can still read
// it.
func (r request) Body(limit int64) ([]byte, error) {
	limit = max(limit, 0)
	b := r.c.Body()
	if int64(len(b)) > limit {
		return nil, keyfunc.BodyTooLarge(limit)
	}
	return bytes.Clone(b), nil
}
