// Command gin shows ratekit on gin with routes limited differently:
//
//   - POST /login: 5 failed logins per 15 minutes per client IP; successful
//     logins are not counted (try password "secret").
//   - /api/*: 100 requests per minute per API key (X-API-Key header or
//     api_key query parameter), told with the IETF RateLimit fields.
//   - GET /healthz: not limited.
//
// Run it and try it:
//
//	go run ./examples/gin
//	curl -i -X POST -d password=guess localhost:8080/login
//	curl -i -H 'X-API-Key: demo' localhost:8080/api/items
//
// Limits live in memory; set REDIS_URL to keep them in Redis.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	store := exampleenv.Store()
	login := must(core.NewLimiter(store, core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}}}))
	quota := must(core.NewLimiter(store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}))

	r := gin.Default()
	r.POST("/login", ginlimit.New(login,
		guard.WithKey(keyfunc.ClientIP()),
		guard.WithCountIf(func(status int) bool { return status == http.StatusUnauthorized }),
	), func(c *gin.Context) {
		if c.PostForm("password") != "secret" {
			c.String(http.StatusUnauthorized, "wrong password\n")
			return
		}
		c.String(http.StatusOK, "welcome\n")
	})

	api := r.Group("/api", ginlimit.New(quota,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithNoKey(guard.NoKeyReject),
		guard.WithHeaders(guard.HeadersIETF),
	))
	api.GET("/items", func(c *gin.Context) { c.JSON(http.StatusOK, []string{"apple", "pear"}) })
	api.GET("/users", func(c *gin.Context) { c.JSON(http.StatusOK, []string{"ada", "linus"}) })

	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })

	log.Printf("listening on %s: try `curl -i -X POST -d password=guess http://%s/login` six times", *addr, *addr)
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func must(l *core.Limiter, err error) *core.Limiter {
	if err != nil {
		log.Fatal(err)
	}
	return l
}
