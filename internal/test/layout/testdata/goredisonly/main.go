// Command goredisonly is a program that limits with core on a redisstore
// Store: internal/test/layout builds it to check that it links no other Redis
// client.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	l, _ := core.NewLimiter(redisstore.New(rdb), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	d, _ := l.Allow(context.Background(), "k")
	fmt.Println(d.Allowed)
}
