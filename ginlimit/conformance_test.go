package ginlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// handler is the suite's handler; gin has no error return, so every reply
// is written.
func handler(c *gin.Context) {
	body, _ := io.ReadAll(c.Request.Body)
	rep := adaptertest.ReplyTo(c.Query, body)
	if rep.Panic != nil {
		panic(rep.Panic)
	}
	c.String(rep.Status, "%s", rep.Body)
}

func newServer(t *testing.T, l *core.Limiter, o adaptertest.Options) string {
	opts := o.GuardOptions()
	if o.DenyHandler {
		opts = append(opts, ginlimit.WithDenyHandler(func(c *gin.Context, v *guard.Verdict) {
			status, body := adaptertest.DenyReply(v)
			c.String(status, "%s", body)
		}))
	}
	if o.ChallengeHandler {
		opts = append(opts, ginlimit.WithChallengeHandler(func(c *gin.Context, v *guard.Verdict) {
			status, body := adaptertest.ChallengeReply(v)
			c.String(status, "%s", body)
		}))
	}
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	chain := []gin.HandlerFunc{ginlimit.New(l, opts...), handler}
	if o.Outer != nil {
		chain = append([]gin.HandlerFunc{ginlimit.New(o.Outer.Limiter, o.Outer.Options.GuardOptions()...)}, chain...)
	}
	if o.AnyMethod {
		r.Any(adaptertest.Path, chain...)
	} else {
		r.GET(adaptertest.Path, chain...)
		r.POST(adaptertest.Path, chain...)
	}
	var h http.Handler = r
	if o.Decompress {
		h = adaptertest.Gunzip(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) { adaptertest.Run(t, newServer) }

func TestOneLiners(t *testing.T) {
	adaptertest.RunOneLiners(t, adaptertest.OneLiners[gin.HandlerFunc]{
		LimitByIP:     ginlimit.LimitByIP,
		LimitByAppKey: ginlimit.LimitByAppKey,
		LimitByUser:   ginlimit.LimitByUser,
		UseStore:      ginlimit.UseStore,
	}, func(t *testing.T, limit gin.HandlerFunc) adaptertest.Call {
		auth := func(c *gin.Context) {
			if u := c.GetHeader(adaptertest.UserHeader); u != "" {
				c.Set(adaptertest.UserKey, u)
			}
		}
		r := gin.New()
		r.GET(adaptertest.Path, auth, limit, handler)
		ts := httptest.NewServer(r)
		t.Cleanup(ts.Close)
		return adaptertest.HTTPCall(t, ts.URL)
	})
}
