package redisstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore"
)

// TestConfigPanicsNameTheOption: the constructors that cannot return an
// error panic, at construction, with a message naming what is wrong.
func TestConfigPanicsNameTheOption(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"New nil", func() { redisstore.New(nil) }, "redisstore.New"},
		{"WithBatching zero", func() { redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithBatching(0)) }, "WithBatching"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.HasPrefix(msg, "ratekit: ") || !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want a message starting with \"ratekit: \" naming %s", msg, tc.want)
				}
			}()
			tc.f()
		})
	}
}
