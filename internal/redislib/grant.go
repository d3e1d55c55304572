package redislib

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// GrantSuffix is the suffix of the key of a (policy, key)'s grant
// ([driver.Grants]) beside its log: in the same slot, by the same hash
// tag. Its value is GrantValue's; it expires at the grant's end.
const GrantSuffix = ":grant"

// GrantKey returns the Redis key of the grant of policy's bounded key.
func GrantKey(prefix, policy, bounded string) string {
	return Key(prefix, policy, bounded) + GrantSuffix
}

// grantText is the part of a grant's value only its readers need.
type grantText struct {
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
}

// GrantValue returns the stored value of g: "<extra>|<exempt 0 or
// 1>|<until, ms since the Unix epoch>|<by and note, JSON>"; the decisions
// (redis.lua) read the first two fields.
func GrantValue(g driver.Grant) string {
	e := "0"
	if g.Exempt {
		e = "1"
	}
	text, _ := json.Marshal(grantText{By: g.By, Note: g.Note}) // strings only: no error
	return strconv.FormatInt(g.Extra, 10) + "|" + e + "|" + strconv.FormatInt(g.Until.UnixMilli(), 10) + "|" + string(text)
}

// ParseGrant parses a value of GrantValue.
func ParseGrant(v string) (driver.Grant, error) {
	parts := strings.SplitN(v, "|", 4)
	if len(parts) != 4 {
		return driver.Grant{}, fmt.Errorf("grant %q: not extra|exempt|until|text", v)
	}
	extra, err1 := strconv.ParseInt(parts[0], 10, 64)
	until, err2 := strconv.ParseInt(parts[2], 10, 64)
	var text grantText
	err3 := json.Unmarshal([]byte(parts[3]), &text)
	if err := errors.Join(err1, err2, err3); err != nil {
		return driver.Grant{}, fmt.Errorf("grant %q: %w", v, err)
	}
	return driver.Grant{Extra: extra, Exempt: parts[1] == "1", Until: time.UnixMilli(until), By: text.By, Note: text.Note}, nil
}

// CheckGrant refuses a grant no limiter sends: the bounds of
// [driver.Grants]; a revocation (zero Until) is always valid.
func CheckGrant(g driver.Grant) error {
	if g.Until.IsZero() {
		return nil
	}
	if g.Extra < 0 || g.Extra > driver.MaxGrantExtra || g.Exempt == (g.Extra != 0) ||
		len(g.By) > driver.MaxGrantText || len(g.Note) > driver.MaxGrantText {
		return fmt.Errorf("grant %+v: %w", g, driver.ErrInvalidQuery)
	}
	return nil
}

// ErrOlderInstance is wrapped by the error of a grant refused because an
// instance of a release that reads no grants still uses the policy: it
// would admit the key by the rules alone.
var ErrOlderInstance = driver.ErrOlderRelease

// GrantsRead returns nil when every live instance announced in members
// (the policy's fleet key, live announcements only) reads grants; else an
// error wrapping ErrOlderInstance that names the policy and the instance.
func GrantsRead(policy string, members []string) error {
	for _, m := range members {
		parts := strings.SplitN(m, "|", 3)
		f := int64(FormatFirst)
		if len(parts) >= 2 {
			if v, err := strconv.ParseInt(parts[1], 10, 32); err == nil {
				f = v
			}
		}
		if f < FormatGrants {
			return fmt.Errorf("%w %q (instance %s, format %d; grants need %d): grant again once it stopped",
				ErrOlderInstance, policy, parts[0], f, FormatGrants)
		}
	}
	return nil
}

// grantOf splits a decision's reply status into the allowed status and
// the key's grant (see redis.lua).
func grantOf(status float64) (float64, int64, bool) {
	if status < 4 {
		return status, 0, false
	}
	s := int64(status)
	switch g := s / 4; g {
	case 1:
		return float64(s % 4), 0, true
	default:
		return float64(s % 4), g - 2, false
	}
}
