package rueidisstore_test

import (
	"fmt"
	"log"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rueidisstore"
)

// New shares the windows between every instance using the same Redis,
// whichever driver each uses. rueidis connects when the client is made;
// a decision is one script call on the key's slot. The store is closed
// before its client.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Printf("no Redis: %v", err)
		return
	}
	defer client.Close()
	store := rueidisstore.New(client)
	defer store.Close() // before the client: ends the store's goroutines
	limiter, err := core.NewLimiter(store, core.Policy{
		Name:  "login-ip",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	}, core.WithTimeout(20*time.Millisecond), core.WithFailurePolicy(core.FailLocal))
	if err != nil {
		log.Fatal(err)
	}
	_ = limiter // limiter.Allow(ctx, "203.0.113.7") decides on Redis
	fmt.Println(store.Key("login-ip", "203.0.113.7"))
}
