// Command quickstart is the smallest ratekit server: GET /hello is limited
// to 5 requests per 10 seconds per client IP, GET /healthz is not limited.
//
//	go run ./examples/quickstart
//	for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' localhost:8080/hello; done   # 200 ×5, then 429
//	curl -i localhost:8080/hello   # 429 with Retry-After
//
// Flags (every example takes them): -addr (127.0.0.1:8080), -trusted-proxy
// CIDR[,CIDR] (read the client address from X-Forwarded-For sent by those
// proxies) and -failure-policy local|open|closed (what limiters do while
// Redis fails). Limits live in memory; set REDIS_URL
// (redis://127.0.0.1:6379/0) to keep them in Redis, shared by every
// instance. To see the 503 of -failure-policy closed, point REDIS_URL at a
// port where no Redis listens:
//
//	REDIS_URL=redis://127.0.0.1:1/0 go run ./examples/quickstart -failure-policy closed
//	curl -i localhost:8080/hello   # 503 Service Unavailable
package main

import (
	"io"
	"log"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

func main() {
	flags := exampleenv.Parse("127.0.0.1:8080", exampleenv.ByIP)
	h, err := newHandler(exampleenv.Store(), flags.ClientIP, flags.Options()...)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: run `curl -i http://%s/hello` six times within 10 s; the sixth answers 429 with Retry-After", flags.Addr, flags.Addr)
	srv := &http.Server{Addr: flags.Addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newHandler returns the server's routes, limited on store per client IP
// as clientIP finds it.
func newHandler(store core.Store, clientIP keyfunc.Func, opts ...core.Option) (http.Handler, error) {
	hello, err := core.NewLimiter(store, core.Policy{
		Name:  "quickstart-hello",
		Rules: []core.Rule{{Limit: 5, Window: 10 * time.Second}},
	}, opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.New(hello, guard.WithKey(clientIP))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux, nil
}
