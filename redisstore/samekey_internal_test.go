package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
)

// TestSameKeyBatchMatchesSerial: decisions on one key sent together in
// one script call, which the script decides from the state the previous
// decision left rather than a new read, answer exactly as the same
// decisions sent one call each on a twin key. The limits let the log
// outgrow what the script reads whole, the clock runs past the windows
// so that logs are trimmed and their TTLs renewed, and peeks, denials,
// costs above 1 and refunds are mixed in.
func TestSameKeyBatchMatchesSerial(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			rules := []driver.Rule{{Limit: 120, Window: 30 * time.Millisecond}, {Limit: 700, Window: 400 * time.Millisecond}}
			if seed == 1 {
				rules = rules[1:]
			}
			now := time.Now().UnixMicro()
			type op struct {
				code byte
				n    int64
				now  int64
			}
			var admittedAt []int64 // times of units taken in both runs, for refunds
			decide := func(key string, ops []op, at []int64, batched bool) []*redislib.Call {
				calls := make([]*redislib.Call, len(ops))
				for i, o := range ops {
					q := driver.Query{Policy: "same", Key: key, N: o.n, Keep: 700, Now: o.now, Rules: rules}
					c := redislib.Get()
					if err := c.Decision(s.prefix, &q, o.code, at[i], o.now, false, nil); err != nil {
						t.Fatal(err)
					}
					calls[i] = c
				}
				if batched {
					s.flight(ctx, calls)
				} else {
					for _, c := range calls {
						s.flight(ctx, []*redislib.Call{c})
					}
				}
				return calls
			}
			for round := range 150 {
				// The decisions' clock keeps up with the server's, which
				// expires the keys.
				now = max(now, time.Now().UnixMicro())
				ops := make([]op, 1+rng.IntN(24))
				at := make([]int64, len(ops))
				for i := range ops {
					now += int64(rng.IntN(300))
					ops[i] = op{code: redislib.OpTake, n: 1, now: now}
					switch r := rng.IntN(20); {
					case r == 0:
						ops[i].code = redislib.OpPeek
					case r == 1:
						ops[i].n = 1 + int64(rng.IntN(5))
					case r == 2 && len(admittedAt) > 0:
						j := rng.IntN(len(admittedAt))
						ops[i].code, at[i] = redislib.OpRefund, admittedAt[j]
						admittedAt = append(admittedAt[:j], admittedAt[j+1:]...)
					}
				}
				b := decide("batched", ops, at, true)
				one := decide("serial", ops, at, false)
				for i := range ops {
					x, y := b[i], one[i]
					if x.Err != nil || y.Err != nil {
						t.Fatalf("round %d op %d: errors %v, %v", round, i, x.Err, y.Err)
					}
					if x.Allowed != y.Allowed || x.When != y.When || fmt.Sprint(x.Rules.All()) != fmt.Sprint(y.Rules.All()) {
						t.Fatalf("round %d op %d (%+v): batched %v at %d %v; one call each %v at %d %v",
							round, i, ops[i], x.Allowed, x.When, x.Rules.All(), y.Allowed, y.When, y.Rules.All())
					}
					if ops[i].code == redislib.OpTake && x.Allowed && ops[i].n == 1 {
						admittedAt = append(admittedAt, x.When)
					}
				}
			}
			for _, k := range []string{"batched", "serial"} {
				srv.Do(t, "DEL", s.Key("same", k))
			}
		})
	}
}
