package ratekitotel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// Attribute keys of the instruments.
const (
	AttrPolicy  = attribute.Key("ratekit.policy")
	AttrOutcome = attribute.Key("ratekit.outcome")
	AttrSource  = attribute.Key("ratekit.source")
	AttrResult  = attribute.Key("ratekit.result")
)

// DefaultBuckets returns the default bucket boundaries, in seconds, of
// the store duration histogram: 100 µs to 250 ms, around the limiter's
// 20 ms default timeout.
func DefaultBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .25}
}

// Option configures an [Observer].
type Option func(*options)

type options struct {
	buckets []float64
}

// WithBuckets sets the bucket boundaries, in seconds, of the store
// duration histogram; [DefaultBuckets] by default.
func WithBuckets(b []float64) Option {
	return func(o *options) { o.buckets = append([]float64(nil), b...) }
}

// Observer records ratekit events with OpenTelemetry instruments. It
// implements [core.Observer] and is safe for concurrent use.
type Observer struct {
	decisions    metric.Int64Counter
	dryRun       metric.Int64Counter
	skips        metric.Int64Counter
	blocks       metric.Int64Counter
	lockouts     metric.Int64Counter
	challenges   metric.Int64Counter
	passes       metric.Int64Counter
	keyErrors    metric.Int64Counter
	fallbacks    metric.Int64Counter
	cacheHits    metric.Int64Counter
	storeErrors  metric.Int64Counter
	duration     metric.Float64Histogram
	breakerOpen  metric.Int64Gauge
	breakerOpens metric.Int64Counter

	policies sync.Map // policy name -> *policyAttrs
}

// policyAttrs holds one policy's attribute sets, built once, as ready
// option slices so that recording does not allocate.
type policyAttrs struct {
	policy     []metric.AddOption
	decisions  [2][core.SourceClosed + 1][]metric.AddOption // [denied, allowed][source]
	fallbacks  [core.SourceClosed + 1][]metric.AddOption
	durOK      []metric.RecordOption
	durErr     []metric.RecordOption
	gaugePoint []metric.RecordOption
}

// New returns an observer recording through meter. The error joins those
// of the instruments meter could not create.
func New(meter metric.Meter, opts ...Option) (*Observer, error) {
	if meter == nil {
		return nil, errors.New("ratekitotel: New: nil meter")
	}
	o := options{buckets: DefaultBuckets()}
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	obs := &Observer{
		decisions:    counter("ratekit.decisions", "{decision}", "Rate-limit decisions by policy, outcome (allowed, denied) and source (store, cache, local, open, closed)."),
		dryRun:       counter("ratekit.dry_run.denials", "{request}", "Denials let through because the guard is in dry-run mode; also counted in ratekit.decisions."),
		skips:        counter("ratekit.skips", "{request}", "Requests not limited: a skip rule matched, the request had no key or cost nothing."),
		blocks:       counter("ratekit.blocks", "{request}", "Requests refused by a block rule (403) without a decision."),
		lockouts:     counter("ratekit.lockouts", "{decision}", "Denials of a key locked out (Policy.Lockout); also counted in ratekit.decisions."),
		challenges:   counter("ratekit.challenges", "{decision}", "Requests challenged at a rule's Challenge threshold (Rule.Challenge); also counted as denied in ratekit.decisions."),
		passes:       counter("ratekit.passes", "{event}", "Challenges passed (Limiter.Pass) and recorded by the store."),
		keyErrors:    counter("ratekit.key_errors", "{request}", "Requests whose key function failed."),
		fallbacks:    counter("ratekit.fallbacks", "{decision}", "Decisions made by the failure policy because the store failed, by source (local, open, closed)."),
		cacheHits:    counter("ratekit.deny_cache.hits", "{decision}", "Denials answered by the limiter's deny cache without a store call."),
		storeErrors:  counter("ratekit.store.errors", "{error}", "Failed or timed-out store calls."),
		breakerOpens: counter("ratekit.breaker.opens", "{event}", "Times the circuit breaker of the policy's limiter opened."),
	}
	var err error
	obs.duration, err = meter.Float64Histogram("ratekit.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of store calls by result (ok, error)."),
		metric.WithExplicitBucketBoundaries(o.buckets...))
	errs = append(errs, err)
	obs.breakerOpen, err = meter.Int64Gauge("ratekit.breaker.open", metric.WithUnit("1"),
		metric.WithDescription("1 while the circuit breaker of the policy's limiter is open, else 0."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return obs, nil
}

// Observe implements [core.Observer].
func (o *Observer) Observe(ctx context.Context, e core.Event) {
	a := o.attrs(e.Policy)
	switch e.Kind {
	case guard.EventDryRun:
		// A denial the middleware let through; the limiter counted it as
		// a denial in ratekit.decisions.
		o.dryRun.Add(ctx, 1, a.policy...)
	case core.EventDecision:
		o.observeDecision(ctx, a, &e)
	case core.EventStoreError:
		o.storeErrors.Add(ctx, 1, a.policy...)
		if e.Latency > 0 {
			o.duration.Record(ctx, e.Latency.Seconds(), a.durErr...)
		}
	case core.EventBreakerOpen:
		o.breakerOpen.Record(ctx, 1, a.gaugePoint...)
		o.breakerOpens.Add(ctx, 1, a.policy...)
	case core.EventBreakerClose:
		o.breakerOpen.Record(ctx, 0, a.gaugePoint...)
	case core.EventPass:
		o.passes.Add(ctx, 1, a.policy...)
	case guard.EventSkip:
		o.skips.Add(ctx, 1, a.policy...)
	case guard.EventBlock:
		o.blocks.Add(ctx, 1, a.policy...)
	case guard.EventKeyError:
		o.keyErrors.Add(ctx, 1, a.policy...)
	}
}

// observeDecision records a decision event: the decision by outcome and source,
// then what it also was (a lockout, a challenge, a deny-cache hit, a
// fallback) or, from the store, how long the store took.
func (o *Observer) observeDecision(ctx context.Context, a *policyAttrs, e *core.Event) {
	d := &e.Decision
	if d.Source > core.SourceClosed {
		// A source this version does not know: build its attributes now.
		o.decisions.Add(ctx, 1, metric.WithAttributes(AttrPolicy.String(e.Policy),
			AttrOutcome.String(outcome(d.Allowed)), AttrSource.String(d.Source.String())))
		return
	}
	allowed := 0
	if d.Allowed {
		allowed = 1
	}
	o.decisions.Add(ctx, 1, a.decisions[allowed][d.Source]...)
	if d.Locked && !d.Allowed {
		o.lockouts.Add(ctx, 1, a.policy...)
	}
	if d.Challenged {
		o.challenges.Add(ctx, 1, a.policy...)
	}
	switch {
	case d.Source == core.SourceCache:
		o.cacheHits.Add(ctx, 1, a.policy...)
	case d.Source.Fallback():
		o.fallbacks.Add(ctx, 1, a.fallbacks[d.Source]...)
	case d.Source == core.SourceStore && e.Latency > 0:
		o.duration.Record(ctx, e.Latency.Seconds(), a.durOK...)
	}
}

func outcome(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// attrs returns the attribute sets of the named policy, building them on
// first use.
func (o *Observer) attrs(name string) *policyAttrs {
	if a, ok := o.policies.Load(name); ok {
		return a.(*policyAttrs)
	}
	p := AttrPolicy.String(name)
	set := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	a := &policyAttrs{
		policy:     []metric.AddOption{set(p)},
		durOK:      []metric.RecordOption{set(p, AttrResult.String("ok"))},
		durErr:     []metric.RecordOption{set(p, AttrResult.String("error"))},
		gaugePoint: []metric.RecordOption{set(p)},
	}
	for allowed, out := range []string{"denied", "allowed"} {
		for s := core.SourceStore; s <= core.SourceClosed; s++ {
			a.decisions[allowed][s] = []metric.AddOption{set(p, AttrOutcome.String(out), AttrSource.String(s.String()))}
		}
	}
	for _, s := range []core.Source{core.SourceLocal, core.SourceOpen, core.SourceClosed} {
		a.fallbacks[s] = []metric.AddOption{set(p, AttrSource.String(s.String()))}
	}
	v, _ := o.policies.LoadOrStore(name, a)
	return v.(*policyAttrs)
}
