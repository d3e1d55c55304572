package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
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
// hot key, with the limit and Redis window of the hot pattern (never
// reached), for about dur. The request count comes from rps, the rate an
// earlier run of the same configuration measured, or else from a short
// calibration run, so that the run is bounded in time whatever the
// machine's speed.
func runCeiling(ctx context.Context, rdb *redis.Client, port string, run ceilingRun, dur time.Duration, rps float64) (ceilingResult, error) {
	sha, err := rdb.ScriptLoad(ctx, ceilingScript).Result()
	if err != nil {
		return ceilingResult{}, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	if rps <= 0 {
		cal, err := redisBenchmark(ctx, port, sha, run, 1000*run.pipeline)
		if err != nil {
			return ceilingResult{}, err
		}
		rps = cal.rps
	}
	n := max(int(rps*dur.Seconds()), 1000)
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
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return res, fmt.Errorf("INFO commandstats: %w", err)
	}
	if cost := parseRedisCost(info); cost.scriptCalls > 0 {
		res.serverUsec = cost.scriptUsec / cost.scriptCalls
	}
	return res, rdb.FlushAll(ctx).Err()
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
		"EVALSHA", sha, "1", "ceiling:{hot}", strconv.FormatInt(roomyWindow.Milliseconds(), 10), strconv.Itoa(roomy), "__rand_int__",
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
