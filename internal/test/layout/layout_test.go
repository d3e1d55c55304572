// Package layout_test checks that the packages depend on each other as the
// design says: adapters on guard (fiberlimit and grpclimit also on
// internal/peeraddr, which writes their peers' net.Addr in one allocation
// and depends on nothing of ratekit), guard on core and keyfunc, core on
// its driver contract (core/driver, the standard library only) and the
// memory store (core/internal/memstore), the Redis drivers on the contract and
// internal/redislib and never on the engine, each on its own client only,
// the test kit ratekittest on core alone, and keyfunc on nothing of
// ratekit; none of them on heavy libraries nor, but the drivers, on a
// Redis client. TestFloors keeps the library below the test harnesses
// (internal/test), the examples' support and the command's body.
package layout_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/ratekit/ratekit"

// The Redis clients: each driver links its own, and nothing else links
// either.
const (
	goRedis = "github.com/redis/go-redis"
	rueidis = "github.com/redis/rueidis"
)

// deps returns the packages pkg depends on, itself included, as go list
// reports them for the build (not the tests).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestDependencies(t *testing.T) {
	for _, tc := range []struct {
		pkg string
		// allowed lists the ratekit packages pkg may import.
		allowed []string
		// banned lists import path prefixes pkg must not link.
		banned []string
	}{
		{"core/driver", nil, []string{"net/http", goRedis, rueidis}},
		{"core/internal/memstore", []string{"core/driver"}, []string{"net/http", goRedis, rueidis}},
		{"core/internal/netlist", nil, []string{"net/http", goRedis, rueidis}},
		{"core", []string{"core/driver", "core/internal/memstore", "core/internal/netlist"}, []string{"net/http", "github.com/nyaruka/phonenumbers", "google.golang.org/protobuf", "golang.org/x/text", goRedis, rueidis}},
		{"keyfunc", nil, []string{"github.com/nyaruka/phonenumbers", "google.golang.org/protobuf", "golang.org/x/text", goRedis, rueidis}},
		// The drivers know the contract, never the engine.
		{"internal/redislib", []string{"core/driver"}, []string{"net/http", goRedis, rueidis}},
		{"redisstore", []string{"core/driver", "internal/redislib"}, []string{"net/http", "github.com/nyaruka/phonenumbers", rueidis}},
		{"rueidisstore", []string{"core/driver", "internal/redislib"}, []string{"net/http", "github.com/nyaruka/phonenumbers", goRedis}},
		{"keyfunc/personal", []string{"keyfunc"}, nil},
		{"guard", engine("keyfunc"), []string{"github.com/nyaruka/phonenumbers", "golang.org/x/text", goRedis, rueidis}},
		{"nethttp", engine("guard", "keyfunc"), []string{"github.com/nyaruka/phonenumbers"}},
		{"ginlimit", engine("guard", "keyfunc"), []string{"github.com/nyaruka/phonenumbers"}},
		{"echolimit", engine("guard", "keyfunc"), []string{"github.com/nyaruka/phonenumbers"}},
		{"fiberlimit", engine("guard", "keyfunc", "internal/peeraddr"), []string{"github.com/nyaruka/phonenumbers"}},
		{"grpclimit", engine("guard", "keyfunc", "internal/peeraddr"), []string{"github.com/nyaruka/phonenumbers"}},
		{"internal/peeraddr", nil, []string{"net/http"}},
		// An app's tests link the test kit: no Redis client, no framework.
		{"ratekittest", engine(), []string{"net/http", "github.com/nyaruka/phonenumbers", "google.golang.org/protobuf", "golang.org/x/text", goRedis, rueidis}},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			allowed := map[string]bool{module + "/" + tc.pkg: true}
			for _, a := range tc.allowed {
				allowed[module+"/"+a] = true
			}
			for _, d := range deps(t, tc.pkg) {
				if strings.HasPrefix(d, module+"/") && !allowed[d] {
					t.Errorf("%s depends on %s", tc.pkg, d)
				}
				for _, b := range tc.banned {
					if d == b || strings.HasPrefix(d, b+"/") {
						t.Errorf("%s links %s", tc.pkg, d)
					}
				}
			}
		})
	}
}

// engine returns the packages a user of core links (core, its driver
// contract and the memory store) and pkgs.
func engine(pkgs ...string) []string {
	return append([]string{"core", "core/driver", "core/internal/memstore", "core/internal/netlist"}, pkgs...)
}

// TestDriverContractStandardOnly: the driver contract imports only the
// standard library, so that a driver of any client can implement it.
func TestDriverContractStandardOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/core/driver").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != module+"/core/driver" {
			t.Errorf("core/driver depends on %s, want the standard library only", p)
		}
	}
}

// TestMemoryOnlyBinary builds a program that limits on a MemoryStore with
// core alone, and checks that it links neither the Redis client's code
// (core imports no Redis client: the driver is package redisstore) nor the
// heavy libraries.
func TestMemoryOnlyBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "memoryonly")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/memoryonly").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	var client int
	for _, line := range strings.Split(string(out), "\n") {
		for _, banned := range []string{"phonenumbers", "google.golang.org/protobuf", "golang.org/x/text", rueidis} {
			if strings.Contains(line, banned) {
				t.Errorf("a memory-only program links %s: %s", banned, line)
			}
		}
		if strings.Contains(line, "github.com/redis/go-redis/v9.(*") {
			client++
		}
	}
	// A Redis store linked in brings about 1,800 methods of go-redis's
	// types; type descriptors that core's declarations name stay.
	if client > 50 {
		t.Errorf("a memory-only program links %d methods of go-redis's types, want none of its client code", client)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory-only program: %.1f MB, %d go-redis methods", float64(fi.Size())/1e6, client)
}

// TestGoRedisOnlyBinary builds a program that limits on a redisstore
// Store, and checks that it links no rueidis: a go-redis user does not
// pay for the second driver.
func TestGoRedisOnlyBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "goredisonly")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/goredisonly").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	var goredis int
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, rueidis) {
			t.Errorf("a go-redis program links rueidis: %s", line)
		}
		if strings.Contains(line, goRedis+"/v9.(*") {
			goredis++
		}
	}
	if goredis == 0 {
		t.Error("the go-redis program links no go-redis method: the check proves nothing")
	}
}

// TestFloors: the library never stands on what stands on it. No library
// package (public, or internal but for the test harnesses under
// internal/test) links a test harness, an example's support or the
// command's body; the library's internals (core/internal/memstore,
// internal/redislib, internal/peeraddr, internal/race) link no public
// package but the driver contract.
func TestFloors(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	above := []string{module + "/internal/test/", module + "/examples/", module + "/cmd/"}
	internals := map[string]bool{"core/internal/memstore": true, "core/internal/netlist": true, "internal/redislib": true, "internal/peeraddr": true, "internal/race": true}
	library := 0
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module+"/")
		if rel == pkg || strings.HasPrefix(rel, "internal/test/") || strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "cmd/") {
			continue
		}
		library++
		for _, d := range deps(t, rel) {
			for _, a := range above {
				if strings.HasPrefix(d, a) {
					t.Errorf("%s links %s, which stands above the library", rel, d)
				}
			}
			if internals[rel] && strings.HasPrefix(d, module+"/") && d != pkg && d != module+"/core/driver" && !strings.HasPrefix(d, module+"/internal/") {
				t.Errorf("%s, a library internal, links %s", rel, d)
			}
		}
	}
	if library < 20 {
		t.Errorf("%d library packages checked, want every one (20 or more)", library)
	}
}
