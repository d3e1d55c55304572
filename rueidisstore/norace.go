//go:build !race

package rueidisstore

import "github.com/redis/rueidis"

// raceSafe returns c: see race.go.
func raceSafe(c rueidis.Client) rueidis.Client { return c }
