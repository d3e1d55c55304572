package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

// serveEnv, when set, makes the test binary run the example's main
// instead of its tests, with the arguments in serveArgs: how
// TestPlansAcrossProcesses starts real instances of the example.
const (
	serveEnv  = "QUOTA_EXAMPLE_SERVE"
	serveArgs = "QUOTA_EXAMPLE_ARGS"
)

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		os.Args = append([]string{"quota"}, strings.Fields(os.Getenv(serveArgs))...)
		main()
		return
	}
	os.Exit(m.Run())
}

// instance is the example running in a process of its own.
type instance struct {
	url string
	log *lockedBuffer
}

// startInstance runs the example in a new process with the environment
// env added, on a free loopback port, and waits until it answers. The
// process is killed when the test ends.
func startInstance(t *testing.T, env ...string) instance {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1", serveArgs+"=-addr "+addr, "QUOTA_ADMIN_TOKEN="+adminToken)
	cmd.Env = append(cmd.Env, env...)
	in := instance{url: "http://" + addr, log: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = in.log, in.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("instance %s:\n%s", addr, in.log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if res, err := http.Get(in.url + "/healthz-none"); err == nil {
			res.Body.Close()
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s did not answer within 30 s:\n%s", addr, in.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call sends a request with an API key (and a JSON body, for the admin
// route) and returns the status and the body.
func (in instance) call(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, in.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// planOf returns the plan /quota reports for key.
func (in instance) planOf(t *testing.T, key string) string {
	t.Helper()
	status, body := in.call(t, http.MethodGet, "/quota", key, "")
	var q quotaStatus
	if status != http.StatusOK || json.Unmarshal([]byte(body), &q) != nil {
		t.Fatalf("GET /quota: %d %s", status, body)
	}
	return q.Plan
}

// TestPlansAcrossProcesses runs the example twice, as two processes. On
// one Redis (REDIS_URL) they share the plan table: demo-free, over its
// free quota on both, moved to pro through the first instance's admin
// route, has the pro plan on the second too, at once. Without REDIS_URL
// each process has its own table, as the example says: the move holds on
// the first instance only.
func TestPlansAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and a redis-server")
	}
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		env := "REDIS_URL=redis://" + srv.Addr() + "/0"
		a, b := startInstance(t, env), startInstance(t, env)
		for range 10 {
			a.call(t, http.MethodPost, "/api/reports", "demo-free", "") // 10 × 10 units: the free minute's 100
		}
		if status, _ := b.call(t, http.MethodGet, "/api/items", "demo-free", ""); status != http.StatusTooManyRequests {
			t.Fatalf("B, demo-free over its quota on A: %d, want 429 (shared usage)", status)
		}
		if status, body := a.call(t, http.MethodPost, "/admin/plan", "", `{"key":"demo-free","plan":"pro"}`); status != http.StatusOK {
			t.Fatalf("POST /admin/plan on A: %d %s", status, body)
		}
		if got := b.planOf(t, "demo-free"); got != "pro" {
			t.Errorf("B's /quota after the move on A: plan %q, want pro", got)
		}
		if status, _ := b.call(t, http.MethodGet, "/api/items", "demo-free", ""); status != http.StatusOK {
			t.Errorf("B, demo-free after the move to pro on A: %d, want 200", status)
		}
		// A third instance, started later, seeds nothing over the move.
		if got := startInstance(t, env).planOf(t, "demo-free"); got != "pro" {
			t.Errorf("a new instance's /quota: plan %q, want pro (kept in Redis)", got)
		}
	})
	t.Run("memory", func(t *testing.T) {
		a, b := startInstance(t), startInstance(t)
		if status, body := a.call(t, http.MethodPost, "/admin/plan", "", `{"key":"demo-free","plan":"pro"}`); status != http.StatusOK {
			t.Fatalf("POST /admin/plan on A: %d %s", status, body)
		}
		if got := a.planOf(t, "demo-free"); got != "pro" {
			t.Errorf("A's /quota after the move: plan %q, want pro", got)
		}
		if got := b.planOf(t, "demo-free"); got != "free" {
			t.Errorf("B's /quota without REDIS_URL: plan %q, want free (each process has its own table)", got)
		}
		if !strings.Contains(a.log.String(), "plans: in this process's memory") {
			t.Errorf("A does not say its plans are its own:\n%s", a.log)
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for a process's concurrent output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
