package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisCost is what Redis spent in one measured window, from INFO
// commandstats (reset at the window's start) and INFO cpu (read at both
// ends).
type redisCost struct {
	scriptCalls float64 // FCALL, EVALSHA, EVAL and their _RO forms
	scriptUsec  float64 // their execution time, µs
	allUsec     float64 // execution time of every command but the harness's own (INFO, CONFIG), µs
	cpuUsec     float64 // the server process's CPU time (user + system), µs: execution, I/O and all
}

// scriptCommands are the commandstats names of script calls: ratekit calls
// its library with FCALL (EVALSHA where Functions are missing), the peers
// with EVALSHA.
var scriptCommands = map[string]bool{
	"fcall": true, "fcall_ro": true,
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true,
}

// harnessCommand reports whether a commandstats name is the harness's own
// reading of the stats rather than a library's work.
func harnessCommand(name string) bool {
	return name == "info" || name == "config" || strings.HasPrefix(name, "config|")
}

// parseRedisCost reads the cmdstat_* lines of INFO commandstats into a
// redisCost (cpuUsec stays 0).
func parseRedisCost(info string) redisCost {
	var c redisCost
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		var calls, usec float64
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				calls = f
			case "usec":
				usec = f
			}
		}
		if harnessCommand(name) {
			continue
		}
		c.allUsec += usec
		if scriptCommands[name] {
			c.scriptCalls += calls
			c.scriptUsec += usec
		}
	}
	return c
}

// parseCPUSeconds returns used_cpu_user + used_cpu_sys of INFO cpu, in
// seconds; ok is false if either is missing.
func parseCPUSeconds(info string) (sec float64, ok bool) {
	found := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, cut := strings.Cut(strings.TrimSpace(line), ":")
		if !cut || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		sec += f
		found++
	}
	return sec, found == 2
}

// redisProbe measures a window's redisCost: CONFIG RESETSTAT and INFO cpu
// at its start, INFO commandstats and cpu at its end.
type redisProbe struct {
	rdb    *redis.Client
	cpu0   float64
	cpuOK  bool
	err    error
	result redisCost
}

func (p *redisProbe) start(ctx context.Context) {
	if err := p.rdb.ConfigResetStat(ctx).Err(); err != nil {
		p.err = fmt.Errorf("CONFIG RESETSTAT: %w", err)
		return
	}
	info, err := p.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		p.err = fmt.Errorf("INFO cpu: %w", err)
		return
	}
	p.cpu0, p.cpuOK = parseCPUSeconds(info)
}

func (p *redisProbe) stop(ctx context.Context) {
	if p.err != nil {
		return
	}
	info, err := p.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		p.err = fmt.Errorf("INFO commandstats cpu: %w", err)
		return
	}
	p.result = parseRedisCost(info)
	if cpu1, ok := parseCPUSeconds(info); ok && p.cpuOK {
		p.result.cpuUsec = (cpu1 - p.cpu0) * 1e6
	}
}
