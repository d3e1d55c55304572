// Package upgradetest runs the previous release of ratekit beside the
// working tree on one real Redis, as a rolling deploy and a rollback do:
// both build the same app instance (the command in agent/), one from a
// tree of the previous release extracted from the repository's history,
// the other from the working tree, and the test tells them what to decide
// and checks that, together, they admit exactly what the policies allow.
//
// A release reads what the previous release writes, and writes nothing
// the previous release misreads while an instance of it still runs
// (docs/upgrading.md): this is where a change of the stored format, of
// the Lua library's arguments or of key names shows whether it kept to
// that.
package upgradetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Release is a release of ratekit: its name and the commit it was made
// from.
type Release struct {
	Name, Commit string
}

// Previous is the release the working tree runs beside: the newest
// release named (CHANGELOG.md lists them). It changes when an issue names
// a later one.
var Previous = Release{Name: "v0.1.0", Commit: "bd71dfe2b1d833aa750726dd8b3f1d38c34c426a"}

// Build returns an agent built from the working tree (r the zero
// Release) or from the tree of release r, extracted from the
// repository's history; the build is made once per test binary and
// release. It fails t when the history does not hold r's commit (a
// shallow clone): the test needs it.
func Build(t testing.TB, r Release) string {
	t.Helper()
	builds.mu.Lock()
	b := builds.by[r]
	if b == nil {
		b = &build{}
		builds.by[r] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.bin, b.err = b.make(r) })
	if b.err != nil {
		t.Fatalf("upgradetest: build the agent of %s: %v", name(r), b.err)
	}
	return b.bin
}

var builds = struct {
	mu sync.Mutex
	by map[Release]*build
}{by: map[Release]*build{}}

type build struct {
	once sync.Once
	bin  string
	err  error
	dir  string
}

func name(r Release) string {
	if r == (Release{}) {
		return "the working tree"
	}
	return r.Name + " (" + r.Commit[:7] + ")"
}

// make builds the agent of r in a directory of its own.
func (b *build) make(r Release) (string, error) {
	here, err := agentSource()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ratekit-upgradetest-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	bin := filepath.Join(dir, "agent")
	pkg := "./internal/test/upgradetest/agent"
	root := filepath.Join(filepath.Dir(here), "..", "..", "..", "..") // the working tree's
	src := root
	if r != (Release{}) {
		src = filepath.Join(dir, "tree")
		if err := extract(root, r.Commit, src); err != nil {
			return "", err
		}
		// The agent's source is the working tree's, built against r.
		code, err := os.ReadFile(here)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Join(src, "internal", "upgradeagent"), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(src, "internal", "upgradeagent", "main.go"), code, 0o644); err != nil {
			return "", err
		}
		pkg = "./internal/upgradeagent"
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", pkg, src, err, out)
	}
	return bin, nil
}

// agentSource returns the path of the agent's main.go.
func agentSource() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("no source path")
	}
	return filepath.Join(filepath.Dir(file), "agent", "main.go"), nil
}

// extract writes the tree of commit, from the repository at root, to dir.
func extract(root, commit, dir string) error {
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return fmt.Errorf("the repository at %s does not hold commit %s: the upgrade test builds the previous release from the repository's history; clone it whole (not shallow) or fetch that commit: %w %s",
			root, commit, err, out)
	}
	var archive bytes.Buffer
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	cmd.Stdout = &archive
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", commit, err, stderr.String())
	}
	tr := tar.NewReader(&archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(os.PathSeparator)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// Agent is a running app instance: a process of an agent's build.
type Agent struct {
	Name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

// Start starts an instance of the agent built at bin, ended when t ends.
func Start(t testing.TB, bin, name string) *Agent {
	t.Helper()
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agent %s: %v", name, err)
	}
	a := &Agent{Name: name, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	a.out.Buffer(make([]byte, 1<<20), 1<<20)
	t.Cleanup(a.Stop)
	return a
}

// Stop ends the instance: its input closes and it exits.
func (a *Agent) Stop() {
	if a.in == nil {
		return
	}
	_ = a.in.Close()
	a.in = nil
	_ = a.cmd.Wait()
}

// Request is what an agent is told: see agent/main.go.
type Request = map[string]any

// Answer is what an agent answers.
type Answer struct {
	Err        string `json:"err"`
	Allowed    bool   `json:"allowed"`
	Remaining  int64  `json:"remaining"`
	RetryAfter int64  `json:"retry_after_us"`
	Locked     bool   `json:"locked"`
	Challenged bool   `json:"challenged"`
	Source     string `json:"source"`
	Ticket     int    `json:"ticket"`
}

// Do tells a what r says and returns its answer, failing t when it
// cannot talk to the instance or the answer is an error.
func (a *Agent) Do(t testing.TB, r Request) Answer {
	t.Helper()
	ans, err := a.Try(r)
	if err != nil {
		t.Fatalf("%s: %v: %v", a.Name, r, err)
	}
	return ans
}

// Try is Do without failing on an error answer.
func (a *Agent) Try(r Request) (Answer, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return Answer{}, err
	}
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		return Answer{}, fmt.Errorf("write: %w", err)
	}
	if !a.out.Scan() {
		return Answer{}, fmt.Errorf("no answer: %w", a.out.Err())
	}
	var ans Answer
	if err := json.Unmarshal(a.out.Bytes(), &ans); err != nil {
		return Answer{}, err
	}
	if ans.Err != "" {
		return ans, errors.New(ans.Err)
	}
	return ans, nil
}

// Cleanup removes what Build made; call it when the tests end (TestMain).
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	for _, b := range builds.by {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
}
