package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

// TestMain lets a test run the test binary as the ratekit command, to see
// what the whole process writes to its stderr.
func TestMain(m *testing.M) {
	if os.Getenv("RATEKIT_TEST_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestRefusedProcess: run from a shell against a Redis that refuses
// connections, the command says so in its own words, and go-redis' own
// log line stays out of the output.
func TestRefusedProcess(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	cmd := exec.Command(os.Args[0], "peek", "-policy", "login", "-rules", "1/1m", "alice")
	cmd.Env = append(os.Environ(), "RATEKIT_TEST_AS_MAIN=1", "REDIS_URL=redis://"+addr+"/0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("ratekit peek: %v; stderr %q", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "ratekit peek: ") || strings.Contains(line, "connection pool") {
			t.Errorf("ratekit peek: stderr line %q is not the command's own", line)
		}
	}
	if !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("ratekit peek: stderr %q, want the refusal", stderr.String())
	}
}
