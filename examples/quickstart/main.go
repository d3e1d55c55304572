// Command quickstart is the smallest ratekit server: GET /hello is limited
// to 5 requests per 10 seconds per client IP, GET /healthz is not limited.
//
//	go run ./examples/quickstart
//	curl -i localhost:8080/hello
//
// Limits live in memory; set REDIS_URL (redis://localhost:6379/0) to keep
// them in Redis, shared by every instance.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	hello, err := core.NewLimiter(exampleenv.Store(), core.Policy{
		Name:  "hello",
		Rules: []core.Rule{{Limit: 5, Window: 10 * time.Second}},
	})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.New(hello, guard.WithKey(keyfunc.ClientIP()))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })

	log.Printf("listening on %s: run `curl -i http://%s/hello` six times within 10 s; the sixth answers 429 with Retry-After", *addr, *addr)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
