package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The instructions mode (-instructions) counts what Redis executes per
// decision: redis-server runs under valgrind's callgrind, collecting only
// inside the commands that run scripts (FCALL, EVALSHA, EVAL), so that
// a library's script, the commands it calls and Redis's own work for the
// call are counted, and nothing else. Each Redis-backed library decides
// alone, at one goroutine: a warm-up (every key of the pattern once),
// then instrMeasured decisions between a reset and a dump of the
// counters. The count is the same on a quiet machine and a busy one,
// where the timed cells' Redis µs per decision swing by a third: it
// settles a verdict near 1.0× that the clock cannot.

// instrMeasured is the number of decisions counted per library and
// pattern.
const instrMeasured = 2000

// instrCell is one library's count on one pattern.
type instrCell struct {
	lib, pat string
	perDec   float64 // instructions per decision
}

func instructions(ctx context.Context, cfg config) error {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return errors.New("valgrind not found on PATH: install it (apt-get install valgrind)")
	}
	ctl, err := exec.LookPath("callgrind_control")
	if err != nil {
		return errors.New("callgrind_control not found on PATH: it comes with valgrind")
	}
	dir, err := os.MkdirTemp("", "ratekit-bench-callgrind-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "cg.out")
	srv, err := startRedis(ctx, vg, "--tool=callgrind", "--collect-atstart=no",
		"--toggle-collect=fcallCommand", "--toggle-collect=evalShaCommand", "--toggle-collect=evalCommand",
		"--callgrind-out-file="+out)
	if err != nil {
		return err
	}
	defer srv.stop()
	// Under valgrind Redis runs some 50 times slower: long timeouts.
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, ReadTimeout: 10 * time.Second})
	defer rdb.Close()
	e := &env{rdb: rdb}
	defer e.close()
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	var cells []instrCell
	dumps := 0
	for _, p := range patterns() {
		if !p.allowed || !selected(cfg.pats, p.name) {
			continue
		}
		for _, l := range libraries() {
			if l.store != "redis" || !selected(cfg.libs, l.name) {
				continue
			}
			n, err := instrCount(ctx, e, l, p, ctl, pid, out, &dumps)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", l.name, p.name, err)
			}
			logf("instructions %-22s %-4s %8.0f per decision", l.name, p.name, n)
			cells = append(cells, instrCell{lib: l.name, pat: p.name, perDec: n})
		}
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(cfg.out, "instructions.md")
	if err := os.WriteFile(path, []byte(instrReport(cells)), 0o644); err != nil {
		return err
	}
	logf("wrote %s", path)
	return nil
}

// instrCount returns the instructions Redis ran per decision of l on p.
func instrCount(ctx context.Context, e *env, l *library, p *pattern, ctl, pid, out string, dumps *int) (float64, error) {
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	allow, closeLib, err := l.setup(e, p)
	if err != nil {
		return 0, err
	}
	defer closeLib()
	keys := p.keys
	// ratekit's first decision loads its library, outside the count.
	if err := instrRun(ctx, allow, keys, max(len(keys), 200), 0); err != nil {
		return 0, err
	}
	if err := exec.CommandContext(ctx, ctl, "-z", pid).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control -z: %w", err)
	}
	if err := instrRun(ctx, allow, keys, instrMeasured, len(keys)/2); err != nil {
		return 0, err
	}
	if err := exec.CommandContext(ctx, ctl, "-d", pid).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control -d: %w", err)
	}
	*dumps++
	total, err := dumpTotal(fmt.Sprintf("%s.%d", out, *dumps))
	if err != nil {
		return 0, err
	}
	return float64(total) / instrMeasured, nil
}

// instrRun makes n decisions in turn, on keys from index from on; a
// decision that errs or falls back ends it.
func instrRun(ctx context.Context, allow allowFunc, keys []string, n, from int) error {
	for i := range n {
		if _, err := allow(ctx, keys[(from+i)%len(keys)]); err != nil {
			return err
		}
	}
	return nil
}

// dumpTotal reads the instruction total of a callgrind dump (its
// "summary:" or "totals:" line), waiting a little for the file.
func dumpTotal(path string) (int64, error) {
	var f *os.File
	var err error
	for range 50 {
		if f, err = os.Open(path); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseDumpTotal(bufio.NewScanner(f))
}

func parseDumpTotal(sc *bufio.Scanner) (int64, error) {
	var total int64 = -1
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"summary:", "totals:"} {
			if rest, ok := strings.CutPrefix(line, p); ok {
				v, err := strconv.ParseInt(strings.Fields(rest + " x")[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("callgrind dump: %q: %w", line, err)
				}
				total = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if total < 0 {
		return 0, errors.New("callgrind dump: no summary or totals line")
	}
	return total, nil
}

// instrReport is results/instructions.md: the counts, and ratekit's
// count as a ratio of each library's (the goal's way round: ratekit's
// Redis cost ≤ 1.00× the peer's).
func instrReport(cells []instrCell) string {
	var b strings.Builder
	b.WriteString("# Redis instructions per decision (callgrind)\n\n")
	b.WriteString("Counted by valgrind's callgrind inside FCALL, EVALSHA and EVAL (the script, the commands it calls, Redis's work for the call), one goroutine, " +
		strconv.Itoa(instrMeasured) + " decisions after every key of the pattern was decided once. `make bench-instructions` writes this file; the count does not depend on the machine's load.\n\n")
	b.WriteString("| library | pattern | instructions per decision | ratekit ÷ this |\n|---|---|---:|---:|\n")
	ref := map[string]float64{}
	for _, c := range cells {
		if c.lib == nameRatekit {
			ref[c.pat] = c.perDec
		}
	}
	for _, c := range cells {
		ratio := "–"
		if r, ok := ref[c.pat]; ok {
			ratio = fmtRatio(r, c.perDec)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.lib, c.pat, fmtOps(c.perDec), ratio)
	}
	return b.String()
}
