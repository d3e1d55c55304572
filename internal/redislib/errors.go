package redislib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/ratekit/ratekit/core/driver"
)

// KeyError is the failure of one key's decision in a call that decided
// the others: a key holding another type, say. It wraps
// driver.ErrKeyFailure: it says nothing of the store's health.
type KeyError struct{ Msg string }

func (e *KeyError) Error() string { return "script: " + e.Msg }

// Unwrap returns driver.ErrKeyFailure.
func (e *KeyError) Unwrap() error { return driver.ErrKeyFailure }

// ErrShortReply is the error of a reply shorter than its calls need.
var ErrShortReply = errors.New("script reply too short")

// ErrBusy is the error of a call that found too many calls waiting.
var ErrBusy = errors.New("too many calls waiting for Redis")

// The classes of the errors a Redis server answers with, by the prefix
// of the message (after an "ERR " some servers add).
var (
	refusedPrefixes      = []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"}
	misconfiguredPrefixe = []string{"WRONGPASS", "NOAUTH", "NOPERM", "WRONGTYPE", "DB index", "invalid DB index",
		"unknown command", "AUTH", "invalid password", "Client sent AUTH", "invalid username"}
)

// hasPrefix reports whether msg, a Redis error message, starts with
// prefix, after an "ERR " some servers add.
func hasPrefix(msg, prefix string) bool {
	return strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), prefix)
}

// Refused reports a message with which Redis refuses a command without
// running it (a replica read-only after a failover, a cluster down or
// rehashing, a server loading), so that sending it again cannot count
// twice.
func Refused(msg string) bool {
	for _, p := range refusedPrefixes {
		if hasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Moved reports an error message of a Cluster whose slot map changed or
// is changing hands: MOVED, ASK, CLUSTERDOWN, or READONLY (a master
// turned replica by a failover).
func Moved(msg string) bool {
	for _, p := range movedPrefixes {
		if hasPrefix(msg, p) {
			return true
		}
	}
	return false
}

var movedPrefixes = []string{"MOVED", "ASK", "CLUSTERDOWN", "READONLY"}

// Redirect reports a Cluster's redirect, MOVED or ASK: the node did not
// run the command, and names the node that would.
func Redirect(msg string) bool { return hasPrefix(msg, "MOVED ") || hasPrefix(msg, "ASK ") }

// ConnFailure reports an error of the connection to a server, not one
// the server answered with: refused, reset, closed (EOF), or a network
// timeout. The driver's context ending is not one.
func ConnFailure(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// TryAgain reports the answer of a Cluster to a command of several keys
// of one slot while the slot migrates and its keys are split between the
// two nodes: the command did not run.
func TryAgain(msg string) bool { return hasPrefix(msg, "TRYAGAIN") }

// NoScript reports a script not in the server's cache (EVALSHA).
func NoScript(msg string) bool { return hasPrefix(msg, "NOSCRIPT") }

// NoFunction reports a function not loaded (FCALL).
func NoFunction(msg string) bool { return hasPrefix(msg, "Function not found") }

// UnknownCommand reports a command the server lacks (FCALL before Redis
// 7, or a command renamed away).
func UnknownCommand(msg string) bool { return hasPrefix(msg, "unknown command") }

// NoPermission reports a command an ACL forbids.
func NoPermission(msg string) bool { return hasPrefix(msg, "NOPERM") }

// OutOfMemory reports a server at maxmemory that refuses writes.
func OutOfMemory(msg string) bool { return hasPrefix(msg, "OOM") }

// Misconfigured reports a message that no retry can change: the server
// refused the client's credentials, database or commands.
func Misconfigured(msg string) bool {
	for _, p := range misconfiguredPrefixe {
		if hasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// ErrUnsafeEviction is wrapped by the error a driver's Check returns when
// a Redis server's maxmemory-policy lets it evict live limiter keys.
//
// An evicted key is a forgotten window: the key's next request is
// admitted as if it had made none, and an attacker can force evictions
// with a flood of random keys. Every policy but noeviction can evict
// limiter keys: the allkeys-* policies pick among all keys, and the
// volatile-* policies among the keys with a time to live, which every
// limiter key has (it expires just after its longest window), so
// volatile-* protects only the app's keys without one. volatile-ttl
// evicts the keys nearest to expiry first: limiter keys idle for almost
// their longest window, whose entries still count until then.
//
// Safe settings: maxmemory-policy noeviction, where a full Redis refuses
// writes, the store call fails and the failure policy decides (reported
// to the observers); or a Redis of the limiter's own with memory sized
// for its keys and no maxmemory.
var ErrUnsafeEviction = errors.New("eviction policy can drop live limiter keys")

// Eviction is a server's maxmemory-policy and maxmemory (bytes; 0 means
// no limit, or unknown).
type Eviction struct {
	Policy    string
	MaxMemory int64
}

// EvictionOfConfig reads the answer of CONFIG GET maxmemory*; ok is false
// when it has no maxmemory-policy.
func EvictionOfConfig(cfg map[string]string) (e Eviction, ok bool) {
	if cfg["maxmemory-policy"] == "" {
		return Eviction{}, false
	}
	mm, _ := strconv.ParseInt(cfg["maxmemory"], 10, 64)
	return Eviction{Policy: cfg["maxmemory-policy"], MaxMemory: mm}, true
}

// EvictionOfInfo reads the answer of INFO memory; ok is false when it
// has no maxmemory_policy.
func EvictionOfInfo(info string) (e Eviction, ok bool) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, found := strings.CutPrefix(line, "maxmemory_policy:"); found {
			e.Policy = v
		} else if v, found := strings.CutPrefix(line, "maxmemory:"); found {
			e.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return e, e.Policy != ""
}

// Check returns an error wrapping ErrUnsafeEviction, naming the server at
// addr, unless the policy is noeviction. The driver adds its prefix.
func (e Eviction) Check(addr string) error {
	if e.Policy == "noeviction" {
		return nil
	}
	limit := "no maxmemory yet"
	if e.MaxMemory > 0 {
		limit = "maxmemory " + strconv.FormatInt(e.MaxMemory, 10) + " bytes"
	}
	return fmt.Errorf("%s: maxmemory-policy %s (%s) can evict live limiter keys, resetting their limits; use noeviction: %w",
		addr, e.Policy, limit, ErrUnsafeEviction)
}

// WrongType reports the error of a key that holds a value of another type
// than the command's.
func WrongType(msg string) bool { return hasPrefix(msg, "WRONGTYPE") }
