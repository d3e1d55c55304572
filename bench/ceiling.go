package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ceilingScript is the classic sliding-window log that rate-limiting
// tutorials give: trim the ZSET to the window, count it, add the request
// if there is room. Time in milliseconds from the server's TIME (a Lua
// number keeps 14 significant digits when passed to redis.call, so
// microseconds would be rounded). ARGV: window (ms), limit, a random
// member suffix.
const ceilingScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, t[1] .. t[2] .. '-' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return 1
end
return 0
`

// ceilingRun is one redis-benchmark configuration.
type ceilingRun struct {
	clients  int
	pipeline int
}

// ceilingResult is what redis-benchmark reported for one configuration.
type ceilingResult struct {
	ceilingRun
	round      string // "before" or "after" the matrix
	rps        float64
	p50, p99   time.Duration
	serverUsec float64 // Redis's own execution time per script call, µs
}

// runCeiling runs redis-benchmark with EVALSHA of ceilingScript on the
// hot key (1 s window, a limit never reached) for about dur. A short
// calibration run first sizes the request count so that the run is
// bounded in time whatever the machine's speed.
func runCeiling(ctx context.Context, rdb *redis.Client, port string, run ceilingRun, dur time.Duration) (ceilingResult, error) {
	sha, err := rdb.ScriptLoad(ctx, ceilingScript).Result()
	if err != nil {
		return ceilingResult{}, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	cal, err := redisBenchmark(ctx, port, sha, run, 2000*run.pipeline)
	if err != nil {
		return ceilingResult{}, err
	}
	n := max(int(cal.rps*dur.Seconds()), 1000)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return ceilingResult{}, err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return ceilingResult{}, err
	}
	res, err := redisBenchmark(ctx, port, sha, run, n)
	if err != nil {
		return ceilingResult{}, err
	}
	if res.serverUsec, err = scriptUsecPerCall(ctx, rdb); err != nil {
		return res, err
	}
	return res, rdb.FlushAll(ctx).Err()
}

// scriptUsecPerCall returns the mean time Redis spent executing a script
// call (EVAL, EVALSHA and their _RO forms) since the last CONFIG
// RESETSTAT, from INFO commandstats; 0 when there was none. It is the
// server's execution time only, without reading and writing the
// connection.
func scriptUsecPerCall(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseScriptUsec(info), nil
}

// parseScriptUsec sums calls and usec of the cmdstat_eval* lines of INFO
// commandstats and returns usec per call.
func parseScriptUsec(info string) float64 {
	var calls, usec float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				calls += f
			case "usec":
				usec += f
			}
		}
	}
	if calls == 0 {
		return 0
	}
	return usec / calls
}

// redisBenchmark runs redis-benchmark for n requests and parses its CSV.
func redisBenchmark(ctx context.Context, port, sha string, run ceilingRun, n int) (ceilingResult, error) {
	args := []string{
		"-h", "127.0.0.1", "-p", port,
		"-c", strconv.Itoa(run.clients),
		"-n", strconv.Itoa(n),
		"-P", strconv.Itoa(run.pipeline),
		"-r", "1000000000",
		"--csv",
		"EVALSHA", sha, "1", "ceiling:{hot}", "1000", strconv.FormatInt(huge, 10), "__rand_int__",
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
	if err != nil {
		return ceilingResult{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	return parseBenchmarkCSV(out, run)
}

// parseBenchmarkCSV reads redis-benchmark --csv output: a header line and
// one line per test with rps and latencies in milliseconds.
func parseBenchmarkCSV(out []byte, run ceilingRun) (ceilingResult, error) {
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return ceilingResult{}, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 {
		return ceilingResult{}, errors.New("redis-benchmark printed no result")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	row := recs[len(recs)-1]
	num := func(name string) (float64, error) {
		i, ok := col[name]
		if !ok || i >= len(row) {
			return 0, fmt.Errorf("redis-benchmark output has no %q column", name)
		}
		return strconv.ParseFloat(row[i], 64)
	}
	r := ceilingResult{ceilingRun: run}
	if r.rps, err = num("rps"); err != nil {
		return r, err
	}
	ms := func(name string) (time.Duration, error) {
		v, err := num(name)
		return time.Duration(v * float64(time.Millisecond)), err
	}
	if r.p50, err = ms("p50_latency_ms"); err != nil {
		return r, err
	}
	if r.p99, err = ms("p99_latency_ms"); err != nil {
		return r, err
	}
	return r, nil
}
