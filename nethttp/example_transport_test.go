package nethttp_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/nethttp"
)

// Throttle the calls an app makes: at most 1 request per 100 ms to the
// provider's host, for every instance sharing the limiter's store. Calls
// over the limit wait for their turn instead of failing.
func ExampleTransport() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	defer provider.Close()

	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "sms-provider",
		Rules: []core.Rule{{Limit: 1, Window: 100 * time.Millisecond}},
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: nethttp.Transport(limiter, http.DefaultTransport)}

	start := time.Now()
	for range 3 {
		res, err := client.Post(provider.URL+"/send", "application/json", strings.NewReader(`{"to":"+8613800138000"}`))
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(res.StatusCode)
	}
	fmt.Println("waited at least 200 ms:", time.Since(start) >= 200*time.Millisecond)
	// Output:
	// 202
	// 202
	// 202
	// waited at least 200 ms: true
}
