// Command gin shows ratekit on gin with routes limited differently:
//
//   - POST /login: 5 failed logins per 15 minutes per client IP; successful
//     logins are not counted (the password is "secret", sent as a form).
//   - /api/*: 100 requests per minute per API key (X-API-Key header or
//     api_key query parameter), told with both the X-RateLimit-* and the
//     IETF RateLimit fields, as the fiber example tells them.
//   - GET /healthz: not limited.
//
// Run it and try it:
//
//	go run ./examples/gin
//	for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' -d password=guess localhost:8084/login; done   # 401 ×5, then 429
//	curl -i -d password=secret localhost:8084/login   # 429 too: the address is locked for 15 minutes
//	curl -i -H 'X-API-Key: demo' localhost:8084/api/items
//
// Flags: -addr (127.0.0.1:8084), -trusted-proxy CIDR[,CIDR] and
// -failure-policy local|open|closed, as in every example. Limits live in
// memory; set REDIS_URL to keep them in Redis.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	flags := exampleenv.Parse("127.0.0.1:8084", exampleenv.ByIP)
	r, err := newRouter(exampleenv.Store(), flags.ClientIP, flags.Options()...)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: try `curl -i -d password=guess http://%s/login` six times", flags.Addr, flags.Addr)
	srv := &http.Server{Addr: flags.Addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newRouter returns the example's routes, limited on store; clientIP says
// how the client address is found.
func newRouter(store core.Store, clientIP keyfunc.Func, opts ...core.Option) (*gin.Engine, error) {
	login, err := core.NewLimiter(store, core.Policy{Name: "gin-login", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}}}, opts...)
	if err != nil {
		return nil, err
	}
	quota, err := core.NewLimiter(store, core.Policy{Name: "gin-api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, opts...)
	if err != nil {
		return nil, err
	}

	r := gin.Default()
	r.POST("/login", ginlimit.New(login,
		guard.WithKey(clientIP),
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
		guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF),
	))
	api.GET("/items", func(c *gin.Context) { c.JSON(http.StatusOK, []string{"apple", "pear"}) })
	api.GET("/users", func(c *gin.Context) { c.JSON(http.StatusOK, []string{"ada", "linus"}) })

	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	return r, nil
}
