package adaptertest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/redisstore"
)

// hostileAdapter mounts a limiter on an HTTP handler answering 200.
type hostileAdapter struct {
	name  string
	mount func(l *core.Limiter, key keyfunc.Func) http.Handler
}

var hostileAdapters = []hostileAdapter{
	{"nethttp", func(l *core.Limiter, key keyfunc.Func) http.Handler {
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		return nethttp.New(l, guard.WithKey(key), guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF))(ok)
	}},
	{"gin", func(l *core.Limiter, key keyfunc.Func) http.Handler {
		gin.SetMode(gin.ReleaseMode)
		r := gin.New()
		r.Any("/*path", ginlimit.New(l, guard.WithKey(key), guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF)),
			func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		return r
	}},
}

// panicGuard answers 500 for a panic and counts it, so that a test sees
// panics as plainly as 500s.
type panicGuard struct {
	next   http.Handler
	panics atomic.Int64
}

func (g *panicGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			g.panics.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		}
	}()
	g.next.ServeHTTP(w, r)
}

// hostileServer serves the adapter's handler for l on a loopback listener.
func hostileServer(t *testing.T, a hostileAdapter, l *core.Limiter, key keyfunc.Func) (*httptest.Server, *panicGuard) {
	t.Helper()
	pg := &panicGuard{next: a.mount(l, key)}
	srv := httptest.NewServer(pg)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if n := pg.panics.Load(); n > 0 {
			t.Errorf("%d requests panicked", n)
		}
	})
	return srv, pg
}

func hostileLimiter(t *testing.T, store core.Store, limit int64, opts ...core.Option) *core.Limiter {
	t.Helper()
	return testkit.Limiter(t, store, core.Policy{Name: "hostile", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}, opts...)
}

// get sends a GET with headers through the server and returns the status.
func get(t *testing.T, srv *httptest.Server, header http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// TestHostileSpoofedForwarding: forwarding headers from a peer that is
// not a trusted proxy never change the key, so rotating them gains a
// client nothing.
func TestHostileSpoofedForwarding(t *testing.T) {
	const limit = 3
	spoofs := []http.Header{
		{"X-Forwarded-For": {"203.0.113.1"}},
		{"X-Forwarded-For": {"203.0.113.2, 10.0.0.1"}},
		{"Forwarded": {"for=198.51.100.7"}},
		{"Forwarded": {`for="[2001:db8::1]:80"`}, "X-Forwarded-For": {"2001:db8::1"}},
		{"X-Real-Ip": {"192.0.2.77"}},
		{"X-Forwarded-For": {"127.0.0.2"}, "X-Real-Ip": {"127.0.0.3"}},
		{"True-Client-Ip": {"192.0.2.1"}, "Cf-Connecting-Ip": {"192.0.2.2"}},
		{},
	}
	for _, a := range hostileAdapters {
		for _, kc := range []struct {
			name string
			key  keyfunc.Func
		}{
			{"default", keyfunc.ClientIP()},
			{"trusting 10.0.0.0/8", keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"), keyfunc.ForwardingHeader("X-Real-IP"))},
		} {
			t.Run(a.name+"/"+kc.name, func(t *testing.T) {
				srv, _ := hostileServer(t, a, hostileLimiter(t, core.NewMemoryStore(), limit), kc.key)
				for i, h := range spoofs {
					want := http.StatusOK
					if i >= limit {
						want = http.StatusTooManyRequests
					}
					if got := get(t, srv, h); got != want {
						t.Errorf("request %d from 127.0.0.1 with %v = %d, want %d (one bucket for the peer)", i+1, h, got, want)
					}
				}
			})
		}
	}
}

// TestHostileIPv6Rotation: a client rotating through the addresses of
// its /64 stays in one bucket, directly and behind a trusted proxy; the
// next /64 is another client.
func TestHostileIPv6Rotation(t *testing.T) {
	const limit = 3
	rnd := rand.New(rand.NewPCG(1, 2))
	addr := func(prefix string) string {
		return fmt.Sprintf("%s:%x:%x:%x:%x", prefix, rnd.Uint32()&0xffff, rnd.Uint32()&0xffff, rnd.Uint32()&0xffff, rnd.Uint32()&0xffff)
	}
	for _, a := range hostileAdapters {
		for _, via := range []string{"direct", "proxy"} {
			t.Run(a.name+"/"+via, func(t *testing.T) {
				h := &panicGuard{next: a.mount(hostileLimiter(t, core.NewMemoryStore(), limit), keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8")))}
				send := func(client string) int {
					r := httptest.NewRequest(http.MethodGet, "/x", nil)
					if via == "direct" {
						r.RemoteAddr = "[" + client + "]:" + strconv.Itoa(1024+rnd.IntN(60000))
					} else {
						r.RemoteAddr = "10.0.0.1:443"
						r.Header.Set("X-Forwarded-For", client)
					}
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w.Code
				}
				for i := range 10 {
					client := addr("2001:db8:1:2")
					want := http.StatusOK
					if i >= limit {
						want = http.StatusTooManyRequests
					}
					if got := send(client); got != want {
						t.Errorf("request %d from %s = %d, want %d (one bucket per /64)", i+1, client, got, want)
					}
				}
				if got := send(addr("2001:db8:1:3")); got != http.StatusOK {
					t.Errorf("request from the next /64 = %d, want 200", got)
				}
				if h.panics.Load() > 0 {
					t.Errorf("%d requests panicked", h.panics.Load())
				}
			})
		}
	}
}

// genBody is a body of n bytes generated as it is read, counting what the
// server read, so the client holds no copy.
type genBody struct {
	n, max int64 // size; most bytes returned by one Read
	read   atomic.Int64
}

func (b *genBody) Read(p []byte) (int, error) {
	read := b.read.Load()
	if read >= b.n {
		return 0, io.EOF
	}
	m := min(int64(len(p)), b.n-read, b.max)
	for i := range p[:m] {
		p[i] = '1'
	}
	b.read.Add(m)
	return int(m), nil
}

// TestHostileHugePhoneBody: a 10 MB body where a phone number is expected
// is a 413, answered after reading at most the phone key's MaxBody (64
// KiB), whether its length is declared or chunked.
func TestHostileHugePhoneBody(t *testing.T) {
	const size = 10 << 20
	key := personal.Phone(personal.DefaultRegion("CN"))
	for _, a := range hostileAdapters {
		for _, declared := range []bool{true, false} {
			name := a.name + "/chunked"
			if declared {
				name = a.name + "/Content-Length"
			}
			t.Run(name, func(t *testing.T) {
				h := &panicGuard{next: a.mount(hostileLimiter(t, core.NewMemoryStore(), 5), key)}
				body := &genBody{n: size, max: 32 << 10}
				r := httptest.NewRequest(http.MethodPost, "/sms", io.NopCloser(body))
				r.Header.Set("Content-Type", "application/json")
				r.ContentLength = -1
				if declared {
					r.ContentLength = size
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				took := time.Since(start)
				runtime.ReadMemStats(&after)
				alloc := after.TotalAlloc - before.TotalAlloc
				if w.Code != http.StatusRequestEntityTooLarge {
					t.Errorf("10 MB body = %d %q, want 413", w.Code, w.Body)
				}
				if limit := int64(personal.DefaultMaxBody + 64<<10); body.read.Load() > limit {
					t.Errorf("the server read %d bytes of the body, want at most %d", body.read.Load(), limit)
				}
				if alloc > 4<<20 {
					t.Errorf("answering allocated %d bytes, want well under the 10 MB body", alloc)
				}
				if took > time.Second {
					t.Errorf("answering took %v, want well under a second", took)
				}
				t.Logf("%s: %d, %d bytes read, %d bytes allocated, %v", name, w.Code, body.read.Load(), alloc, took.Round(time.Microsecond))
			})
		}
		// Over a real connection with a declared length: the 413 comes
		// back without the body being sent in full.
		t.Run(a.name+"/loopback", func(t *testing.T) {
			srv, _ := hostileServer(t, a, hostileLimiter(t, core.NewMemoryStore(), 5), key)
			body := &genBody{n: size, max: 32 << 10}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/sms", body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			start := time.Now()
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("POST 10 MB: %v", err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("POST 10 MB = %d, want 413", res.StatusCode)
			}
			t.Logf("loopback: %d after %v, the client sent %d of %d bytes", res.StatusCode, time.Since(start).Round(time.Microsecond), body.read.Load(), size)
		})
	}
}

// TestHostileHugeKeys: a 100 KB header where a key is expected is a 400
// from the key functions that read headers; a key function that passes
// it on anyway gets it hashed, and Redis never stores it raw.
func TestHostileHugeKeys(t *testing.T) {
	huge := strings.Repeat("k", 100<<10)
	for _, a := range hostileAdapters {
		for _, kc := range []struct {
			name string
			key  keyfunc.Func
		}{
			{"Header", keyfunc.Header("X-Key")},
			{"AppKey", keyfunc.AppKey(keyfunc.AppKeyHeader("X-Key"))},
			{"Join", keyfunc.Join(keyfunc.ClientIP(), keyfunc.Header("X-Key"))},
			{"Phone", personal.Phone(personal.Header("X-Key"))},
		} {
			t.Run(a.name+"/"+kc.name, func(t *testing.T) {
				srv, _ := hostileServer(t, a, hostileLimiter(t, core.NewMemoryStore(), 5), kc.key)
				if got := get(t, srv, http.Header{"X-Key": {huge}}); got != http.StatusBadRequest {
					t.Errorf("100 KB X-Key = %d, want 400", got)
				}
			})
		}
	}

	t.Run("stored hashed", func(t *testing.T) {
		rs := redistest.Start(t)
		rdb := rs.Client(t)
		store := redisstore.New(rdb)
		raw := func(r keyfunc.Request) (string, error) { return r.Header("X-Key"), nil } // no bound of its own
		for _, a := range hostileAdapters {
			l := testkit.Limiter(t, store, core.Policy{Name: "huge-" + a.name, Rules: []core.Rule{{Limit: 1, Window: time.Minute}}},
				core.WithTimeout(5*time.Second))
			srv, _ := hostileServer(t, a, l, raw)
			for i, v := range []string{huge, huge + "x", strings.Repeat("h", 4000)} {
				for j, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
					if got := get(t, srv, http.Header{"X-Key": {v}}); got != want {
						t.Errorf("%s: %d-byte key #%d, request %d = %d, want %d", a.name, len(v), i, j+1, got, want)
					}
				}
			}
		}
		keys, err := rdb.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		keys = slices.DeleteFunc(keys, func(k string) bool {
			return strings.HasSuffix(k, ":fleet") // a policy's count of instances, not a key's
		})
		longest := 0
		for _, k := range keys {
			longest = max(longest, len(k))
		}
		// prefix, policy, braces and the 44-byte hash: about 70 bytes.
		if want := len(store.Key("huge-nethttp", huge)); len(keys) != 6 || longest > want {
			t.Errorf("Redis holds %d keys, the longest %d bytes; want 6 keys of at most %d bytes", len(keys), longest, want)
		}
		t.Logf("%d Redis keys for 100 KB, 100 KB and 4 KB keys; the longest is %d bytes", len(keys), longest)
	})
}

// TestHostileNonUTF8Headers: header bytes that are not UTF-8, or are
// control characters, sent raw on the wire, are answered 200, 400 or 429
// by every key function: never a 500 or a panic.
func TestHostileNonUTF8Headers(t *testing.T) {
	values := []string{"\xff\xfe", "\x80abc", "caf\xe9", "\xc3\x28", "a\x01b\x7f", "\xf0\x28\x8c\x28", "192.0.2.1\xff", `for="\xff"`}
	keys := []struct {
		name string
		key  keyfunc.Func
	}{
		{"ClientIP trusted", keyfunc.ClientIP(keyfunc.TrustedProxies("127.0.0.0/8"), keyfunc.ForwardingHeader("X-Real-IP"))},
		{"AppKey", keyfunc.AppKey()},
		{"Header", keyfunc.Header("X-Key")},
		{"Phone", personal.Phone(personal.Header("X-Phone"), personal.DefaultRegion("CN"))},
		{"Account", personal.Account(personal.Header("X-Account"))},
		{"Join", keyfunc.Join(keyfunc.ClientIP(), keyfunc.Header("X-Key"))},
	}
	headers := []string{"X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Api-Key", "X-Key", "X-Phone", "X-Account"}
	for _, a := range hostileAdapters {
		for _, kc := range keys {
			t.Run(a.name+"/"+kc.name, func(t *testing.T) {
				srv, _ := hostileServer(t, a, hostileLimiter(t, core.NewMemoryStore(), 1000), kc.key)
				statuses := map[int]int{}
				for _, v := range values {
					for _, h := range headers {
						code := rawGet(t, srv.Listener.Addr().String(), h+": "+v)
						statuses[code]++
						switch code {
						case http.StatusOK, http.StatusBadRequest, http.StatusTooManyRequests:
						default:
							t.Errorf("%s: %q = %d, want 200, 400 or 429", h, v, code)
						}
					}
				}
				t.Logf("statuses: %v", statuses)
			})
		}
	}
}

// rawGet sends a GET with one raw header line, byte for byte, and returns
// the status of the answer.
func rawGet(t *testing.T, addr, header string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: test\r\n"+header+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", header, err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}
