package guard

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// HeaderStyle selects which rate-limit header fields a [Guard] writes. The
// styles combine with |.
type HeaderStyle uint8

const (
	// HeadersXRateLimit writes X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset (delta-seconds until the binding rule's window
	// is empty, or its calendar period ends, or the key's lockout ends:
	// when the whole limit is available again, never before Retry-After;
	// the IETF t is when more quota is, see HeadersIETF).
	// They describe one limit: the decision the answer shows (the guard's
	// own on an admission, the denying limit's on a denial), replacing
	// those of an outer middleware. It is the default.
	HeadersXRateLimit HeaderStyle = 1 << iota
	// HeadersIETF writes the IETF draft-10 structured fields
	// RateLimit-Policy and RateLimit, one item per rule, each with a
	// hashed partition key (pk) and, in RateLimit, the remaining quota r
	// and t, delta-seconds until more quota is available (on a denial,
	// until the request fits, which is Retry-After for the denying rule): on an admission, the items of every
	// limit that admitted the request (the guard's own, then those added
	// with [WithAlso]); on a denial, the denying limit's. The fields are
	// lists, added to those of other ratekit middlewares on the same
	// response (see [Verdict.WriteHeaderFields]).
	HeadersIETF
	// HeadersNone writes no rate-limit header fields (Retry-After is still
	// sent on denials).
	HeadersNone HeaderStyle = 0
)

// BodyStyle selects the body of refusals.
type BodyStyle uint8

const (
	// BodyText is a short text/plain reason. It is the default.
	BodyText BodyStyle = iota
	// BodyProblem is an RFC 9457 application/problem+json document for
	// every refusal: a denial is of the IETF "quota-exceeded" problem
	// type naming the violated policy; a malformed request (400), a body
	// too large (413) and a FailClosed refusal (503) are of type
	// "about:blank", titled by their status, with the same fixed detail
	// as the text bodies.
	BodyProblem
)

// NoKeyAction says what a [Guard] does when a key function returns
// [keyfunc.ErrNoKey].
type NoKeyAction uint8

const (
	// NoKeySkip lets the request through without that limit (the others
	// still decide). It is the default: pair it with a limit that covers
	// anonymous requests.
	NoKeySkip NoKeyAction = iota
	// NoKeyShared counts every keyless request under one shared key.
	NoKeyShared
	// NoKeyReject answers 400 Bad Request.
	NoKeyReject
)

// KeyErrorAction says what a [Guard] does when a key function fails with
// an error other than [keyfunc.ErrNoKey].
type KeyErrorAction uint8

const (
	// KeyErrorReject answers 400 Bad Request, or 413 Content Too Large
	// for a body longer than the key function may read
	// ([keyfunc.ErrBodyTooLarge]); gRPC: InvalidArgument. It is the
	// default.
	KeyErrorReject KeyErrorAction = iota
	// KeyErrorSkip lets the request through without that limit.
	KeyErrorSkip
)

// SharedKey is the key under which [NoKeyShared] counts keyless requests.
const SharedKey = "-"

// Header field names written by [Verdict.WriteHeaders], in Go's canonical
// form (field names are case-insensitive: X-Ratelimit-Limit is the
// X-RateLimit-Limit of other libraries), so that http.Header.Set does not
// allocate to canonicalise them.
const (
	HeaderLimit      = "X-Ratelimit-Limit"
	HeaderRemaining  = "X-Ratelimit-Remaining"
	HeaderReset      = "X-Ratelimit-Reset"
	HeaderRetryAfter = "Retry-After"
	HeaderPolicy     = "Ratelimit-Policy"
	HeaderRateLimit  = "Ratelimit"
)

// ProblemType is the RFC 9457 problem type of [BodyProblem] denials.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ChallengeProblemType is the RFC 9457 problem type of the answer to a
// challenged request ([OutcomeChallenge]): the client must answer a
// challenge (a CAPTCHA, a second factor) before it tries again, and
// waiting does not help, so the answer has no Retry-After. IANA
// registers no such type; this URI names ratekit's documentation of it.
const ChallengeProblemType = "https://github.com/ratekit/ratekit/blob/main/docs/jobs.md#challenge-before-lockout"

// Status returns the HTTP status to answer when the request does not
// proceed: 429 over the limit or challenged; 413 for a body longer than the key function
// may read ([keyfunc.ErrBodyTooLarge]), 400 for any other malformed key
// source or cost; 503 when the store failed under FailClosed; 403 when
// blocked ([WithBlock]). It is 200 when the request proceeds.
func (v *Verdict) Status() int {
	switch v.Outcome {
	case OutcomeDeny, OutcomeChallenge:
		return http.StatusTooManyRequests
	case OutcomeInvalid:
		if errors.Is(v.Err, keyfunc.ErrBodyTooLarge) {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	case OutcomeUnavailable:
		return http.StatusServiceUnavailable
	case OutcomeBlocked:
		return http.StatusForbidden
	}
	return http.StatusOK
}

// WriteHeaders calls set for every header field of the answer: the
// rate-limit fields of the selected style on decided requests (allowed,
// denied or challenged), and Retry-After on denials and FailClosed
// refusals (never on a challenge, which waiting does not lift). The values
// share one allocation. It is WriteHeaderFields(set, set): for a
// response that another ratekit middleware may have written its IETF
// fields to, use [Verdict.WriteHeaderFields].
func (v *Verdict) WriteHeaders(set func(name, value string)) {
	v.WriteHeaderFields(set, set)
}

// WriteHeaderFields is [Verdict.WriteHeaders] for a response that other
// middleware may have written rate-limit fields to: the IETF fields
// (RateLimit-Policy, RateLimit) are lists, and their values go to add,
// which must add a value to those the response holds (http.Header.Add,
// fasthttp's ResponseHeader.Add), so that the items of stacked
// middlewares (per client outside, a global cap inside) add up rather
// than replace each other, as draft-10 lists do; every other field goes
// to set, which replaces (the X-RateLimit fields describe one limit: the
// innermost middleware's that decided).
func (v *Verdict) WriteHeaderFields(set, add func(name, value string)) {
	var (
		hs    headerSet
		stack [maxStack]byte
	)
	buf := v.collect(&hs, stack[:0])
	if hs.n == 0 {
		return
	}
	all := string(buf)
	for i := range hs.n {
		name := hs.names[i]
		if isList(name) {
			add(name, all[hs.start(i):hs.ends[i]])
		} else {
			set(name, all[hs.start(i):hs.ends[i]])
		}
	}
}

// WriteHeaderBytes is [Verdict.WriteHeaderFields] for a writer that
// copies what it is given, such as fasthttp's ResponseHeader.SetBytesV
// and AddBytesV: each value is in a buffer that is valid only during the
// call to set or add, which must copy it and must not modify or keep it.
// It allocates nothing.
func (v *Verdict) WriteHeaderBytes(set, add func(name string, value []byte)) {
	b := headerBufs.Get().(*headerBuf)
	buf := v.collect(&b.hs, b.buf[:0])
	for i := range b.hs.n {
		name := b.hs.names[i]
		val := buf[b.hs.start(i):b.hs.ends[i]:b.hs.ends[i]]
		if isList(name) {
			add(name, val)
		} else {
			set(name, val)
		}
	}
	b.hs.n = 0
	headerBufs.Put(b)
}

// headerBuf is the scratch space of [Verdict.WriteHeaderBytes], kept in
// a pool: the values it hands out are on loan, so they cannot be on the
// stack (a pointer into the stack passed to an unknown function moves
// the whole buffer to the heap).
type headerBuf struct {
	hs  headerSet
	buf [maxStack]byte
}

var headerBufs = sync.Pool{New: func() any { return new(headerBuf) }}

// isList reports whether a field of the answers is a list, whose values
// add up across middlewares.
func isList(name string) bool { return name == HeaderPolicy || name == HeaderRateLimit }

// WriteHTTPHeaders writes the header fields of [Verdict.WriteHeaders] to
// h as [Verdict.WriteHeaderFields] says: adding to the IETF fields h
// holds, replacing its values of the others; in a single allocation for
// the X-RateLimit fields, and for IETF fields of up to 320 bytes (the
// items of two or three rules), two beyond. It is what the net/http, gin
// and echo adapters use.
func (v *Verdict) WriteHTTPHeaders(h http.Header) {
	var (
		hs    headerSet
		stack [maxStack]byte
	)
	buf := v.collect(&hs, stack[:0])
	if hs.n == 0 {
		return
	}
	fill(h, &hs, buf, false)
}

// Metadata returns the header fields of [Verdict.WriteHeaders] as gRPC
// metadata holds them (convert to metadata.MD): lowercase keys, one
// value each; nil when there are none. The values share one allocation.
func (v *Verdict) Metadata() map[string][]string {
	var (
		hs    headerSet
		stack [maxStack]byte
	)
	buf := v.collect(&hs, stack[:0])
	if hs.n == 0 {
		return nil
	}
	md := make(map[string][]string, hs.n)
	fill(md, &hs, buf, true)
	return md
}

// fill sets the fields of hs, whose values are in buf, in m: under their
// names, or their lowercase names when lower is set. The values of the
// IETF list fields are added to those m holds.
func fill(m map[string][]string, hs *headerSet, buf []byte, lower bool) {
	vals := values(hs, buf)
	for i := range hs.n {
		name := hs.names[i]
		if lower {
			name = lowerName(name)
		}
		if isList(hs.names[i]) {
			if old := m[name]; len(old) > 0 {
				m[name] = append(old[:len(old):len(old)], vals[i])
				continue
			}
		}
		m[name] = vals[i : i+1 : i+1]
	}
}

// values returns the values of the fields of hs, which are in buf, as
// strings that share one block of memory with the slice holding them: a
// map keeps the block alive as long as it keeps any of them. The block's
// bytes are written once, here, before any string refers to them. The
// usual answer, the three X-RateLimit fields, takes the smallest block;
// the IETF fields alone of a policy of one rule the next.
func values(hs *headerSet, buf []byte) []string {
	var (
		vals []string
		mem  []byte
	)
	switch {
	case hs.n <= len(smallBlock{}.vals) && len(buf) <= len(smallBlock{}.buf):
		b := new(smallBlock)
		vals, mem = b.vals[:hs.n], b.buf[:]
	case hs.n <= len(pairBlock{}.vals) && len(buf) <= len(pairBlock{}.buf):
		b := new(pairBlock)
		vals, mem = b.vals[:hs.n], b.buf[:]
	case len(buf) <= len(valueBlock{}.buf):
		b := new(valueBlock)
		vals, mem = b.vals[:hs.n], b.buf[:]
	case len(buf) <= len(largeBlock{}.buf):
		b := new(largeBlock)
		vals, mem = b.vals[:hs.n], b.buf[:]
	default:
		vals = make([]string, hs.n)
	}
	var all string
	if mem != nil {
		copy(mem, buf)
		all = unsafe.String(&mem[0], len(buf))
	} else {
		all = string(buf)
	}
	for i := range vals {
		vals[i] = all[hs.start(i):hs.ends[i]]
	}
	return vals
}

// lowerName returns a header field name of the answers in lowercase, as
// a gRPC metadata key.
func lowerName(name string) string {
	switch name {
	case HeaderLimit:
		return "x-ratelimit-limit"
	case HeaderRemaining:
		return "x-ratelimit-remaining"
	case HeaderReset:
		return "x-ratelimit-reset"
	case HeaderRetryAfter:
		return "retry-after"
	case HeaderPolicy:
		return "ratelimit-policy"
	}
	return "ratelimit"
}

// maxFields is the most header fields an answer has: three X-RateLimit
// fields, two IETF fields and Retry-After.
const maxFields = 6

// valueBlock holds the header values of one answer written to a map.
type valueBlock struct {
	vals [maxFields]string
	buf  [128]byte // the IETF fields of a policy of one rule
}

// largeBlock is the valueBlock of longer values: the IETF fields of a
// policy of two or three rules.
type largeBlock struct {
	vals [maxFields]string
	buf  [maxStack]byte
}

// maxStack is the size of the buffer on the stack that the header values
// of an answer are collected in; longer values go to the heap.
const maxStack = 320

// pairBlock is the valueBlock of the IETF fields alone (HeadersIETF) of a
// policy of one rule: 144 bytes rather than 224.
type pairBlock struct {
	vals [2]string
	buf  [112]byte
}

// smallBlock is the valueBlock of the usual answer, the three X-RateLimit
// fields: 64 bytes rather than 224.
type smallBlock struct {
	vals [3]string
	buf  [16]byte
}

// headerSet records the header fields of an answer: their names, and
// where their values, laid end to end in one buffer, end.
type headerSet struct {
	n     int
	names [maxFields]string
	ends  [maxFields]int
}

func (hs *headerSet) start(i int) int {
	if i == 0 {
		return 0
	}
	return hs.ends[i-1]
}

// end closes the value of field name, which ends at n.
func (hs *headerSet) end(name string, n int) {
	hs.names[hs.n] = name
	hs.ends[hs.n] = n
	hs.n++
}

// int appends field name with the value x (see appendInt).
func (hs *headerSet) int(buf []byte, name string, x int64) []byte {
	buf = appendInt(buf, x)
	hs.end(name, len(buf))
	return buf
}

// collect appends the header fields of the answer to buf, recording them
// in hs.
func (v *Verdict) collect(hs *headerSet, buf []byte) []byte {
	d := &v.Decision
	decided := v.Outcome == OutcomeAllow && !v.DryRun || v.Outcome == OutcomeDeny || v.Outcome == OutcomeChallenge
	st := v.g.cfg.headers
	if decided && st&HeadersXRateLimit != 0 && advertised(d) {
		buf = v.by.limitText(buf, d.Rule, d.Limit)
		hs.end(HeaderLimit, len(buf))
		buf = hs.int(buf, HeaderRemaining, d.Remaining)
		if !v.by.inFlight {
			// Requests in flight have no window to reset.
			buf = hs.int(buf, HeaderReset, Seconds(d.ResetAfter))
		}
	}
	if decided && st&HeadersIETF != 0 {
		buf = v.ietf(hs, buf)
	}
	switch v.Outcome {
	case OutcomeDeny:
		if d.RetryAfter > 0 {
			buf = hs.int(buf, HeaderRetryAfter, Seconds(d.RetryAfter))
		}
	case OutcomeUnavailable:
		if d.Source == core.SourceClosed {
			buf = hs.int(buf, HeaderRetryAfter, max(1, Seconds(d.RetryAfter)))
		}
	}
	return buf
}

// advertised reports whether a decision has limits to show: one the
// store (or the local fallback) made, not a FailOpen or FailClosed
// answer.
func advertised(d *core.Decision) bool {
	return d.Limit > 0 && d.Source != core.SourceOpen && d.Source != core.SourceClosed
}

// ietf appends the RateLimit-Policy and RateLimit fields: the items of
// every limit that applies to the request, the decision the answer shows
// first: on a denial the denying limit's, on an admission the guard's own
// and then those of the limits added with WithAlso that admitted it. Each
// field is a list, so the items of stacked middlewares add up (see
// [Verdict.WriteHeaderFields]).
func (v *Verdict) ietf(hs *headerSet, buf []byte) []byte {
	// The partition keys, hashed once for both fields: the shown
	// decision's, then those of the first admissions in more.
	var pks [4]pkey
	if advertised(&v.Decision) {
		partitionKey(pks[0][:], v.by.name, v.Key)
	}
	if v.Outcome == OutcomeAllow {
		for i := 0; i < len(v.more) && i+1 < len(pks); i++ {
			if h := &v.more[i]; advertised(&h.d) {
				partitionKey(pks[i+1][:], h.lim.name, h.key)
			}
		}
	}
	for pass, name := range [2]string{HeaderPolicy, HeaderRateLimit} {
		n := 0
		if advertised(&v.Decision) {
			buf = appendItems(buf, pass, v.by, &pks[0], &v.Decision, &n)
		}
		if v.Outcome == OutcomeAllow {
			for i := range v.more {
				if h := &v.more[i]; advertised(&h.d) {
					pk := &pkey{}
					if i+1 < len(pks) {
						pk = &pks[i+1]
					} else {
						partitionKey(pk[:], h.lim.name, h.key)
					}
					buf = appendItems(buf, pass, h.lim, pk, &h.d, &n)
				}
			}
		}
		if n == 0 {
			return buf
		}
		hs.end(name, len(buf))
	}
	return buf
}

// appendItems appends the items of lim's decision d, for the key whose
// partition key is pk, to buf, those
// of RateLimit-Policy on pass 0 and of RateLimit on pass 1; *n counts the
// items of the field so far. One item per rule, named by the policy (and
// the window or calendar period when there are several rules). A
// calendar rule's w is the length of its current period. An item's t is,
// as draft-10 §4.1.2 defines it, the time until more quota is available:
// for a rule that denied the request, until this request fits (so that
// Retry-After is never earlier); otherwise until the window's oldest
// units leave it (core.RuleState.NextAfter), or its period ends; 0 when
// the window holds nothing. While the key
// is locked out (core.Decision.Locked) no item has any quota left until
// the lockout ends. An InFlight policy is one item of quota unit
// "concurrent-requests", without a window or a reset time.
func appendItems(buf []byte, pass int, lim *limit, pk *pkey, d *core.Decision, n *int) []byte {
	if *n > 0 {
		buf = append(buf, ", "...)
	}
	if lim.inFlight {
		*n++
		buf = strconv.AppendQuote(buf, lim.name)
		if pass == 0 {
			buf = append(buf, ";q="...)
			buf = appendInt(buf, d.Limit)
			buf = append(buf, `;qu="concurrent-requests"`...)
		} else {
			buf = append(buf, ";r="...)
			buf = appendInt(buf, d.Remaining)
		}
		buf = append(buf, ";pk=:"...)
		buf = append(buf, pk[:]...)
		return append(buf, ':')
	}
	items := d.Rules()
	if len(items) == 0 {
		items = []core.RuleState{{Limit: d.Limit, Window: d.Window, Used: d.Limit - d.Remaining,
			RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, NextAfter: d.ResetAfter}}
	}
	multi := len(items) > 1
	for i, r := range items {
		*n++
		if i > 0 {
			buf = append(buf, ", "...)
		}
		t := lim.itemText(i, &r, multi)
		if t != nil {
			buf = append(buf, t.name...)
		} else {
			buf = strconv.AppendQuote(buf, itemName(lim.name, r.Window, r.Calendar, multi))
		}
		if pass == 0 {
			if t != nil {
				buf = append(buf, t.qw...)
			} else {
				buf = appendQW(buf, r.Limit, r.Window)
			}
		} else {
			left, more := r.Remaining(), r.NextAfter
			if r.RetryAfter > 0 {
				more = r.RetryAfter // the rule denied: room for this request
			}
			if d.Locked {
				left, more = 0, max(more, d.RetryAfter)
			}
			buf = append(buf, ";r="...)
			buf = appendInt(buf, left)
			buf = append(buf, ";t="...)
			buf = appendInt(buf, Seconds(more))
		}
		buf = append(buf, ";pk=:"...)
		buf = append(buf, pk[:]...)
		buf = append(buf, ':')
	}
	return buf
}

// ItemName is the name the verdict's binding rule goes by in the IETF
// header fields and problem bodies: the policy name, suffixed with the
// rule's window ("sms-60s", "sms-1500ms") or calendar period
// ("api-month") when the decision has several rules. Names are unique
// within a policy, whose windows and periods are distinct.
func (v *Verdict) ItemName() string {
	d := &v.Decision
	rs := d.Rules()
	var cal core.Calendar
	if d.Rule < len(rs) {
		cal = rs[d.Rule].Calendar
	}
	return itemName(v.by.name, d.Window, cal, len(rs) > 1)
}

// appendQW appends the q and w parameters of a RateLimit-Policy item.
func appendQW(buf []byte, limit int64, window time.Duration) []byte {
	buf = append(buf, ";q="...)
	buf = appendInt(buf, limit)
	buf = append(buf, ";w="...)
	return appendInt(buf, Seconds(window))
}

// itemName names a rule in the IETF fields and problem bodies.
func itemName(policy string, window time.Duration, cal core.Calendar, multi bool) string {
	if !multi {
		return policy
	}
	if cal != 0 {
		return policy + "-" + cal.String()
	}
	var w string
	switch {
	case window%time.Second == 0:
		w = strconv.FormatInt(int64(window/time.Second), 10) + "s"
	case window%time.Millisecond == 0:
		w = strconv.FormatInt(int64(window/time.Millisecond), 10) + "ms"
	default:
		w = strconv.FormatInt(int64(window/time.Microsecond), 10) + "us"
	}
	return policy + "-" + w
}

// pkey is a partition key: base64 of 9 bytes of a hash.
type pkey [12]byte

// partitionKey writes to dst (12 bytes) a hash of the key, so that the
// header never reveals it.
func partitionKey(dst []byte, policy, key string) {
	var in [256]byte
	b := append(append(append(in[:0], policy...), 0), key...)
	h := sha256.Sum256(b)
	base64.StdEncoding.Encode(dst, h[:9])
}

// Seconds returns d in whole seconds, rounded up: the delta-seconds of
// Retry-After and the reset fields. It is 0 for d <= 0 and never
// overflows: the longest duration, a "forever" lockout, is 9223372037.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// maxSFInteger is the largest integer of an HTTP structured field
// (RFC 9651: at most 15 digits).
const maxSFInteger = 999_999_999_999_999

// appendInt appends x to buf as a valid non-negative integer of a header
// field: negative values as 0, values beyond a structured-field integer
// as its largest.
func appendInt(buf []byte, x int64) []byte {
	return strconv.AppendInt(buf, min(max(x, 0), maxSFInteger), 10)
}

// Answer sets the content headers of an answer that does not proceed
// (Content-Type, X-Content-Type-Options: nosniff) through set and returns
// its status and fixed body: what every adapter writes after
// [Verdict.WriteHeaders] when no deny handler takes over. The texts are
// fixed: no error detail reaches the client beyond the fixed reason of
// [keyfunc.Reason]. Under [BodyProblem] every refusal is an
// application/problem+json document; a challenge always is, whatever
// [WithBody] says, of type [ChallengeProblemType], so that a client tells
// it from a denial by its type:
//
//	{"type":"https://github.com/ratekit/ratekit/blob/main/docs/jobs.md#challenge-before-lockout",
//	 "title":"Challenge required","status":429,
//	 "detail":"answer the challenge to go on","challenged-policies":["login"]}
func (v *Verdict) Answer(set func(name, value string)) (status int, body []byte) {
	ct, body := v.body()
	set("Content-Type", ct)
	set("X-Content-Type-Options", "nosniff")
	return v.Status(), body
}

// Content types of the answers.
const (
	textPlain   = "text/plain; charset=utf-8"
	problemJSON = "application/problem+json"
)

func (v *Verdict) body() (contentType string, body []byte) {
	if v.Outcome == OutcomeChallenge {
		return problemJSON, v.challengeProblem()
	}
	if v.Outcome == OutcomeDeny {
		if v.g.cfg.body == BodyProblem {
			return problemJSON, v.problem()
		}
		if v.Decision.RetryAfter <= 0 {
			return textPlain, []byte("rate limit exceeded: the request costs more than the limit allows\n")
		}
		return textPlain, []byte("rate limit exceeded: retry after " +
			strconv.FormatInt(Seconds(v.Decision.RetryAfter), 10) + "s\n")
	}
	status, detail := v.Status(), v.detail()
	if detail == "" {
		return "", nil
	}
	if v.g.cfg.body == BodyProblem {
		return problemJSON, statusProblem(status, detail)
	}
	var prefix string
	switch status {
	case http.StatusForbidden:
		prefix = "forbidden: "
	case http.StatusRequestEntityTooLarge:
		prefix = "content too large: "
	case http.StatusBadRequest:
		prefix = "bad request: "
	default:
		prefix = "service unavailable: "
	}
	return textPlain, []byte(prefix + detail + "\n")
}

// detail is the fixed, client-safe reason of a refusal other than a
// denial; "" when the request proceeds.
func (v *Verdict) detail() string {
	switch v.Outcome {
	case OutcomeInvalid:
		if errors.Is(v.Err, keyfunc.ErrBodyTooLarge) {
			return "request body too large"
		}
		// keyfunc.Reason is a fixed text ("invalid phone number"), never
		// request input.
		if r := keyfunc.Reason(v.Err); r != "" {
			return r
		}
		if errors.Is(v.Err, errInvalidCost) {
			return "invalid request cost"
		}
		return "missing or malformed rate-limit key"
	case OutcomeUnavailable:
		return "rate limiter unavailable"
	case OutcomeBlocked:
		return "blocked"
	}
	return ""
}

// statusProblem is the RFC 9457 document of a refusal other than a denial:
// type about:blank, titled by the status's RFC 9110 reason phrase.
func statusProblem(status int, detail string) []byte {
	title := http.StatusText(status)
	if status == http.StatusRequestEntityTooLarge {
		title = "Content Too Large" // RFC 9110's name; net/http keeps the old one
	}
	// encoding/json escapes whatever a Reason() method returns.
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail})
	return append(b, '\n')
}

// challengeProblem is the RFC 9457 document of a challenge.
func (v *Verdict) challengeProblem() []byte {
	var b strings.Builder
	b.WriteString(`{"type":"`)
	b.WriteString(ChallengeProblemType)
	b.WriteString(`","title":"Challenge required","status":429,"detail":"answer the challenge to go on","challenged-policies":[`)
	// Policy names hold no quote, backslash or control character.
	b.WriteString(strconv.Quote(v.ItemName()))
	b.WriteString("]}\n")
	return []byte(b.String())
}

func (v *Verdict) problem() []byte {
	var b strings.Builder
	b.WriteString(`{"type":"`)
	b.WriteString(ProblemType)
	b.WriteString(`","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"`)
	retry := Seconds(v.Decision.RetryAfter)
	if retry > 0 {
		b.WriteString("retry after ")
		b.WriteString(strconv.FormatInt(retry, 10))
		b.WriteString(`s"`)
	} else {
		b.WriteString(`the request costs more than the limit allows"`)
	}
	b.WriteString(`,"violated-policies":[`)
	// Policy names hold no quote, backslash or control character, so
	// strconv.Quote yields valid JSON strings.
	b.WriteString(strconv.Quote(v.ItemName()))
	b.WriteString(`]`)
	if retry > 0 {
		b.WriteString(`,"retry-after":`)
		b.WriteString(strconv.FormatInt(retry, 10))
	}
	b.WriteString("}\n")
	return []byte(b.String())
}
