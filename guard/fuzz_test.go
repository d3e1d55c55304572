package guard_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// FuzzAnswer: for any valid policy, a denial's answer has header fields of
// visible ASCII, IETF fields that parse as structured-field lists of one
// item per rule, and a problem body that is JSON naming the binding rule.
func FuzzAnswer(f *testing.F) {
	f.Add("sms", int64(1), int64(time.Minute), int64(5), int64(time.Hour), 0)
	f.Add("quota", int64(100000), int64(24*time.Hour), int64(0), int64(0), 1)
	f.Add("p", int64(3), int64(time.Millisecond), int64(2), int64(999*time.Millisecond), 0)
	f.Add("p", int64(3), int64(1500*time.Millisecond), int64(5), int64(2*time.Second), 0)
	f.Add("a-b_c.d:e/f|g~!#$%&'()*+,;<=>?@[]^`", int64(1), int64(time.Second), int64(0), int64(0), 0)
	f.Fuzz(func(t *testing.T, name string, l1, w1, l2, w2 int64, alg int) {
		p := core.Policy{Name: name, Rules: []core.Rule{{Limit: l1, Window: time.Duration(w1)}}, Algorithm: core.Algorithm(alg)}
		if l2 != 0 || w2 != 0 {
			p.Rules = append(p.Rules, core.Rule{Limit: l2, Window: time.Duration(w2)})
		}
		l, err := core.NewLimiter(denyStore{}, p)
		if err != nil {
			return // invalid policies are core's to refuse
		}
		g := guard.New(l, guard.WithKey(func(keyfunc.Request) (string, error) { return "k", nil }),
			guard.WithHeaders(guard.HeadersIETF|guard.HeadersXRateLimit), guard.WithBody(guard.BodyProblem))
		v := g.Admit(context.Background(), req())
		if v.Outcome != guard.OutcomeDeny {
			t.Fatalf("Admit with a denying store = %v, want deny", v.Outcome)
		}
		fields := headers(&v)
		for k, val := range fields {
			for i := 0; i < len(val); i++ {
				if c := val[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("header %s = %q: byte %#x is not visible ASCII", k, val, c)
				}
			}
		}
		for _, k := range []string{guard.HeaderPolicy, guard.HeaderRateLimit} {
			list, err := httpsfv.UnmarshalList([]string{fields[k]})
			if err != nil || len(list) != len(p.Rules) {
				t.Fatalf("header %s = %q: %v, want a structured-field list of %d items", k, fields[k], err, len(p.Rules))
			}
		}
		_, body := v.Answer(func(string, string) {})
		var doc struct {
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Violated) != 1 || doc.Violated[0] != v.ItemName() {
			t.Fatalf("problem body %q: %v; want JSON naming %q", body, err, v.ItemName())
		}
	})
}

// denyStore is a Store that denies every request, each rule full and
// freeing in a second.
type denyStore struct{}

func (denyStore) Take(_ context.Context, q driver.Query) (driver.Result, error) {
	var res driver.Result
	for _, r := range q.Rules {
		res.Rules.Append(core.RuleState{Limit: r.Limit, Window: r.Window, Used: r.Limit, RetryAfter: time.Second, ResetAfter: r.Window})
	}
	return res, nil
}

func (s denyStore) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.Take(ctx, q)
}

func (denyStore) Refund(context.Context, driver.Query, int64) error { return nil }

func (denyStore) Reset(context.Context, driver.Query) error { return nil }
