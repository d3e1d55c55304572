package ratekitprom

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// DefaultNamespace is the prefix of every metric name unless
// [WithNamespace] sets another.
const DefaultNamespace = "ratekit"

// DefaultBuckets returns the default upper bounds, in seconds, of the
// store latency histogram: 100 µs to 250 ms, around the limiter's 20 ms
// default timeout.
func DefaultBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .25}
}

// Option configures an [Observer].
type Option func(*options)

type options struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
}

// WithNamespace sets the prefix of every metric name; [DefaultNamespace]
// by default. An empty namespace leaves names unprefixed
// (decisions_total).
func WithNamespace(ns string) Option {
	return func(o *options) { o.namespace = ns }
}

// WithBuckets sets the upper bounds, in seconds, of the store latency
// histogram; [DefaultBuckets] by default.
func WithBuckets(b []float64) Option {
	return func(o *options) { o.buckets = append([]float64(nil), b...) }
}

// WithConstLabels adds labels with fixed values to every metric, for
// example the name of the service. None by default.
func WithConstLabels(l prometheus.Labels) Option {
	return func(o *options) { o.constLabels = l }
}

// Outcome label values of ratekit_decisions_total.
const (
	OutcomeAllowed = "allowed"
	OutcomeDenied  = "denied"
)

// Reason label values of ratekit_store_check_failures_total.
const (
	// ReasonMisconfigured is a store configured so that no decision can
	// succeed until someone changes its configuration: the check's error
	// wraps [core.ErrMisconfigured].
	ReasonMisconfigured = "misconfigured"
	// ReasonOther is any other failed check: a store that may evict
	// limiter keys, or that did not answer.
	ReasonOther = "other"
)

// Observer counts ratekit events as Prometheus metrics. It implements
// [core.Observer] and [prometheus.Collector]. It is safe for concurrent
// use; Observe takes no lock once a policy has been seen.
type Observer struct {
	decisions    *prometheus.CounterVec
	dryRun       *prometheus.CounterVec
	skips        *prometheus.CounterVec
	blocks       *prometheus.CounterVec
	lockouts     *prometheus.CounterVec
	challenges   *prometheus.CounterVec
	passes       *prometheus.CounterVec
	keyErrors    *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	cacheHits    *prometheus.CounterVec
	storeErrors  *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	breakerOpen  *prometheus.GaugeVec
	breakerOpens *prometheus.CounterVec
	fallbackOn   *prometheus.GaugeVec
	rulesDiffer  *prometheus.GaugeVec
	checkFails   *prometheus.CounterVec

	policies sync.Map // policy name -> *policyMetrics
}

// policyMetrics holds one policy's series, resolved once.
type policyMetrics struct {
	decisions    [2][core.SourceClosed + 1]prometheus.Counter // [denied, allowed][source]; nil where impossible
	fallbacks    [core.SourceClosed + 1]prometheus.Counter
	dryRun       prometheus.Counter
	skips        prometheus.Counter
	blocks       prometheus.Counter
	lockouts     prometheus.Counter
	challenges   prometheus.Counter
	passes       prometheus.Counter
	keyErrors    prometheus.Counter
	cacheHits    prometheus.Counter
	storeErrors  prometheus.Counter
	latencyOK    prometheus.Observer
	latencyErr   prometheus.Observer
	breakerOpen  prometheus.Gauge
	breakerOpens prometheus.Counter
	fallbackOn   prometheus.Gauge
	rulesDiffer  prometheus.Gauge
	misconfigs   prometheus.Counter // failed store checks by reason
	otherChecks  prometheus.Counter
}

// New returns an observer whose metrics are collected once it is
// registered with a [prometheus.Registerer].
func New(opts ...Option) *Observer {
	o := options{namespace: DefaultNamespace, buckets: DefaultBuckets()}
	for _, opt := range opts {
		opt(&o)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: o.namespace, Name: name, Help: help, ConstLabels: o.constLabels}, labels)
	}
	return &Observer{
		decisions:   counter("decisions_total", "Rate-limit decisions by policy, outcome (allowed, denied) and source (store, cache, local, open, closed).", "policy", "outcome", "source"),
		dryRun:      counter("dry_run_denials_total", "Denials let through because the guard is in dry-run mode; also counted in decisions_total.", "policy"),
		skips:       counter("skips_total", "Requests not limited: a skip rule matched, the request had no key or cost nothing.", "policy"),
		blocks:      counter("blocks_total", "Requests refused by a block rule (403) without a decision.", "policy"),
		lockouts:    counter("lockouts_total", "Denials of a key locked out (Policy.Lockout); also counted in decisions_total.", "policy"),
		challenges:  counter("challenges_total", "Requests challenged at a rule's Challenge threshold (Rule.Challenge); also counted as denied in decisions_total.", "policy"),
		passes:      counter("passes_total", "Challenges passed (Limiter.Pass) and recorded by the store.", "policy"),
		keyErrors:   counter("key_errors_total", "Requests whose key function failed.", "policy"),
		fallbacks:   counter("fallbacks_total", "Decisions made by the failure policy because the store failed, by source (local, open, closed).", "policy", "source"),
		cacheHits:   counter("deny_cache_hits_total", "Denials answered by the limiter's deny cache without a store call.", "policy"),
		storeErrors: counter("store_errors_total", "Failed or timed-out store calls.", "policy"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.namespace, Name: "store_latency_seconds", ConstLabels: o.constLabels, Buckets: o.buckets,
			Help: "Latency of store calls by result (ok, error).",
		}, []string{"policy", "result"}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.namespace, Name: "breaker_open", ConstLabels: o.constLabels,
			Help: "1 while the circuit breaker of the policy's limiter is open, else 0.",
		}, []string{"policy"}),
		breakerOpens: counter("breaker_opens_total", "Times the circuit breaker of the policy's limiter opened.", "policy"),
		fallbackOn: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.namespace, Name: "fallback_active", ConstLabels: o.constLabels,
			Help: "1 while the policy's limiter decides by its failure policy because the store failed (a fallback episode), else 0.",
		}, []string{"policy"}),
		rulesDiffer: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: o.namespace, Name: "rules_differ", ConstLabels: o.constLabels,
			Help: "1 while the store says other instances use the policy's name with another configuration (rules, algorithm, lockout or tiers), else 0.",
		}, []string{"policy"}),
		checkFails: counter("store_check_failures_total", "Failed store checks (Limiter.Check) by reason: misconfigured (no decision can succeed until the configuration changes) or other (a store that may evict limiter keys, or that did not answer).", "policy", "reason"),
	}
}

func (o *Observer) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.decisions, o.dryRun, o.skips, o.blocks, o.lockouts, o.challenges, o.passes, o.keyErrors,
		o.fallbacks, o.cacheHits, o.storeErrors, o.latency, o.breakerOpen, o.breakerOpens, o.fallbackOn, o.rulesDiffer, o.checkFails}
}

// Describe implements [prometheus.Collector].
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect implements [prometheus.Collector].
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}

// Observe implements [core.Observer].
func (o *Observer) Observe(_ context.Context, e core.Event) {
	m := o.policy(e.Policy)
	switch e.Kind {
	case guard.EventDryRun:
		// A denial the middleware let through; the limiter counted it as
		// a denial in decisions_total.
		m.dryRun.Inc()
	case core.EventDecision:
		o.observeDecision(m, &e)
	case core.EventStoreError, core.EventBreakerOpen, core.EventBreakerClose,
		core.EventFallbackStart, core.EventFallbackEnd, core.EventRulesDiffer, core.EventStoreCheck:
		m.observeStore(&e)
	case core.EventPass:
		m.passes.Inc()
	case guard.EventSkip:
		m.skips.Inc()
	case guard.EventBlock:
		m.blocks.Inc()
	case guard.EventKeyError:
		m.keyErrors.Inc()
	}
}

// observeDecision counts a decision event: the decision by outcome and source,
// then what it also was (a lockout, a challenge, a deny-cache hit, a
// fallback) or, from the store, how long the store took. A source this
// version does not know gets its series now.
func (o *Observer) observeDecision(m *policyMetrics, e *core.Event) {
	d := &e.Decision
	if c := m.decision(d); c != nil {
		c.Inc()
	} else {
		o.decisions.WithLabelValues(e.Policy, outcome(d.Allowed), d.Source.String()).Inc()
	}
	if d.Locked && !d.Allowed {
		m.lockouts.Inc()
	}
	if d.Challenged {
		m.challenges.Inc()
	}
	switch {
	case d.Source == core.SourceCache:
		m.cacheHits.Inc()
	case d.Source.Fallback():
		if c := m.fallback(d.Source); c != nil {
			c.Inc()
		} else {
			o.fallbacks.WithLabelValues(e.Policy, d.Source.String()).Inc()
		}
	case d.Source == core.SourceStore && e.Latency > 0:
		m.latencyOK.Observe(e.Latency.Seconds())
	}
}

// observeStore records an event about the policy's store: a failed call, the
// circuit breaker, a fallback episode, other instances' configuration or
// a failed store check.
func (m *policyMetrics) observeStore(e *core.Event) {
	switch e.Kind {
	case core.EventStoreError:
		m.storeErrors.Inc()
		if e.Latency > 0 {
			m.latencyErr.Observe(e.Latency.Seconds())
		}
	case core.EventBreakerOpen:
		m.breakerOpen.Set(1)
		m.breakerOpens.Inc()
	case core.EventBreakerClose:
		m.breakerOpen.Set(0)
	case core.EventFallbackStart:
		m.fallbackOn.Set(1)
	case core.EventFallbackEnd:
		m.fallbackOn.Set(0)
	case core.EventRulesDiffer:
		if e.Err != nil {
			m.rulesDiffer.Set(1)
		} else {
			m.rulesDiffer.Set(0)
		}
	case core.EventStoreCheck:
		if errors.Is(e.Err, core.ErrMisconfigured) {
			m.misconfigs.Inc()
		} else {
			m.otherChecks.Inc()
		}
	}
}

func outcome(allowed bool) string {
	if allowed {
		return OutcomeAllowed
	}
	return OutcomeDenied
}

func (m *policyMetrics) decision(d *core.Decision) prometheus.Counter {
	if d.Source > core.SourceClosed {
		return nil
	}
	a := 0
	if d.Allowed {
		a = 1
	}
	return m.decisions[a][d.Source]
}

func (m *policyMetrics) fallback(s core.Source) prometheus.Counter {
	if s > core.SourceClosed {
		return nil
	}
	return m.fallbacks[s]
}

// policy returns the series of the named policy, creating them on first
// use.
func (o *Observer) policy(name string) *policyMetrics {
	if m, ok := o.policies.Load(name); ok {
		return m.(*policyMetrics)
	}
	m := &policyMetrics{
		dryRun:       o.dryRun.WithLabelValues(name),
		skips:        o.skips.WithLabelValues(name),
		blocks:       o.blocks.WithLabelValues(name),
		lockouts:     o.lockouts.WithLabelValues(name),
		challenges:   o.challenges.WithLabelValues(name),
		passes:       o.passes.WithLabelValues(name),
		keyErrors:    o.keyErrors.WithLabelValues(name),
		cacheHits:    o.cacheHits.WithLabelValues(name),
		storeErrors:  o.storeErrors.WithLabelValues(name),
		latencyOK:    o.latency.WithLabelValues(name, "ok"),
		latencyErr:   o.latency.WithLabelValues(name, "error"),
		breakerOpen:  o.breakerOpen.WithLabelValues(name),
		breakerOpens: o.breakerOpens.WithLabelValues(name),
		fallbackOn:   o.fallbackOn.WithLabelValues(name),
		rulesDiffer:  o.rulesDiffer.WithLabelValues(name),
		misconfigs:   o.checkFails.WithLabelValues(name, ReasonMisconfigured),
		otherChecks:  o.checkFails.WithLabelValues(name, ReasonOther),
	}
	// The combinations a limiter can produce: admissions come from the
	// store or a fallback that admits; denials from the store, the deny
	// cache or a fallback that denies.
	for _, s := range []core.Source{core.SourceStore, core.SourceLocal, core.SourceOpen} {
		m.decisions[1][s] = o.decisions.WithLabelValues(name, OutcomeAllowed, s.String())
	}
	for _, s := range []core.Source{core.SourceStore, core.SourceCache, core.SourceLocal, core.SourceClosed} {
		m.decisions[0][s] = o.decisions.WithLabelValues(name, OutcomeDenied, s.String())
	}
	for _, s := range []core.Source{core.SourceLocal, core.SourceOpen, core.SourceClosed} {
		m.fallbacks[s] = o.fallbacks.WithLabelValues(name, s.String())
	}
	v, _ := o.policies.LoadOrStore(name, m)
	return v.(*policyMetrics)
}
