//go:build race

package rueidisstore

import (
	"context"

	"github.com/redis/rueidis"
)

// Under the race detector the store's commands are pinned: rueidis does
// not recycle them. rueidis returns a command to its pool once its reply
// is read, while its writer goroutine may still be reading it after
// handing it to the network; only the network orders the two (the reply
// comes after the write), which the race detector cannot see, so it
// reports a race in rueidis on a busy machine. Pinning costs an
// allocation per command, which a race-enabled build does not count.
func raceSafe(c rueidis.Client) rueidis.Client { return pinned{c} }

// pinned is a client whose commands are never recycled.
type pinned struct{ rueidis.Client }

func (c pinned) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return c.Client.Do(ctx, cmd.Pin())
}

func (c pinned) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		multi[i] = multi[i].Pin()
	}
	return c.Client.DoMulti(ctx, multi...)
}

func (c pinned) Receive(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	return c.Client.Receive(ctx, sub.Pin(), fn)
}

func (c pinned) Nodes() map[string]rueidis.Client {
	nodes := make(map[string]rueidis.Client)
	for addr, n := range c.Client.Nodes() {
		nodes[addr] = pinned{n}
	}
	return nodes
}
