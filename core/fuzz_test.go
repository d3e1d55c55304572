package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// FuzzPolicyValidate fuzzes policies: Validate never panics; NewLimiter
// accepts exactly the policies Validate accepts; a valid policy admits a
// first request, and its denial answers carry IETF header fields that
// parse as structured fields and a problem body that is valid JSON
// naming the policy.
func FuzzPolicyValidate(f *testing.F) {
	f.Add("sms", int64(1), int64(time.Minute), int64(5), int64(time.Hour), 0, 0, 0)
	f.Add("quota", int64(100000), int64(24*time.Hour), int64(0), int64(0), 1, 60, 8)
	f.Add("p", int64(10), int64(time.Second), int64(10), int64(time.Second), 0, 0, 0)
	f.Add("p", int64(3), int64(time.Millisecond), int64(2), int64(999*time.Microsecond), 0, 0, 4)
	f.Add("p", int64(1), int64(time.Second+1), int64(0), int64(0), 2, -1, -1)
	f.Add(`a"b\c`, int64(1), int64(time.Second), int64(0), int64(0), 0, 1001, 257)
	f.Add("\x01", int64(1), int64(time.Second), int64(0), int64(0), 0, 0, 0)
	f.Add("登录", int64(1), int64(time.Second), int64(0), int64(0), 0, 0, 0)
	f.Add("a{b", int64(-1), int64(-1), int64(1<<62), int64(1<<62), 0, 0, 0)
	f.Fuzz(func(t *testing.T, name string, l1, w1, l2, w2 int64, alg, buckets, shards int) {
		p := core.Policy{Name: name, Rules: []core.Rule{{Limit: l1, Window: time.Duration(w1)}},
			Algorithm: core.Algorithm(alg), Buckets: buckets, Shards: shards}
		if l2 != 0 || w2 != 0 {
			p.Rules = append(p.Rules, core.Rule{Limit: l2, Window: time.Duration(w2)})
		}
		verr := p.Validate()
		l, err := core.NewLimiter(core.NewMemoryStore(), p)
		if (verr == nil) != (err == nil) {
			t.Fatalf("Validate() = %v but NewLimiter = %v", verr, err)
		}
		if err != nil {
			if !errors.Is(err, core.ErrInvalidPolicy) || !errors.Is(verr, core.ErrInvalidPolicy) {
				t.Fatalf("NewLimiter(%+v) = %v, want ErrInvalidPolicy", p, err)
			}
			return
		}
		ctx := context.Background()
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow(k) on a valid policy %+v = %+v, %v; want allowed", p, d, err)
		}
	})
}
