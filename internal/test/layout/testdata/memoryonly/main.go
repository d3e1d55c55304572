// Command memoryonly is a program that limits with core on a MemoryStore
// alone: internal/test/layout builds it to check what it links.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

func main() {
	l, _ := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	d, _ := l.Allow(context.Background(), "k")
	fmt.Println(d.Allowed)
}
