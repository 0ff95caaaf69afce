package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proxyfleet/proxy-operator/pkg/tier"
)

// An effect on the wire: a format byte, the kind, then the kind's fields in
// a fixed order: integers as (u)varints, times as varint Unix nanoseconds
// (0: the zero time), strings and byte slices with a uvarint length, maps
// sorted by key. A decoder refuses a format or kind it does not know, so a
// replica of an older release stops at an effect of a newer one instead of
// applying it wrongly (docs/decisions/0370-lease-store-components-and-effects.md).

// EffectFormat is the encoding's version, its first byte.
const EffectFormat = 1

// maxEffectBytes bounds what DecodeEffect reads: a crawl policy with many
// rules or 64 KiB of session state is the largest effect.
const maxEffectBytes = 8 << 20

// ErrUnknownEffect: the bytes are not an effect this release knows.
var ErrUnknownEffect = errors.New("not an effect this release knows")

// EncodeEffect appends e's encoding to b.
func EncodeEffect(b []byte, e Effect) []byte {
	w := fieldWriter{b: append(b, EffectFormat, byte(e.Kind()))}
	switch e := e.(type) {
	case ProxyPut:
		w.proxyInfo(e.info)
	case ProxyDelete:
		w.name(e.key)
	case Grant:
		w.token(e.lease)
		w.budgetKey(e.tier.key)
		w.int(int64(e.tier.tier))
		w.bool(e.tier.probe)
		w.bool(e.tier.tiered)
		w.string(e.requestID)
	case Join:
		w.leaseKey(e.key)
		w.time(e.expiresAt)
		w.int(int64(e.ttl))
		w.time(e.at)
	case Renew:
		w.leaseKey(e.key)
		w.time(e.expiresAt)
		w.int(int64(e.ttl))
		w.time(e.at)
	case End:
		w.leaseKey(e.key)
		w.string(e.how)
		w.time(e.at)
		w.int(int64(e.tombstone))
	case Expire:
		w.leaseKey(e.key)
	case Tombstone:
		w.token(e.lease)
		w.int(int64(e.state))
	case Relearn:
		w.token(e.lease)
		w.time(e.at)
	case OutcomeCount:
		w.name(e.proxy)
		w.string(string(e.uid))
		w.leaseKey(e.lease)
		w.string(string(e.outcome))
		w.string(e.domain)
		w.int(e.n)
		w.int(e.bytes)
		w.time(e.at)
	case Ban:
		w.name(e.proxy)
		w.string(string(e.uid))
		w.string(e.domain)
		w.string(e.owner)
		w.time(e.at)
	case CooldownLapse:
		w.name(e.key.proxy)
		w.string(e.key.domain)
	case CooldownDrop:
		w.name(e.key.proxy)
		w.string(e.key.domain)
	case SessionDrop:
		w.sessionKey(e.key)
		w.bool(e.idle)
	case StatePut:
		w.stateKey(e.key)
		w.string(string(e.blob))
	case PolicyPut:
		w.crawlPolicy(e.policy)
		w.time(e.at)
	case PolicyDelete:
		w.name(e.key)
		w.time(e.at)
	case BudgetEvict:
		w.budgetKey(e.key)
	case PoliteNote:
		w.budgetKey(e.rule)
		w.bool(e.refused)
	case Refusal:
		w.string(e.namespace)
		w.string(e.holder)
		w.string(selectorString(e.selector))
		w.time(e.at)
	case PoolForget:
		w.name(e.pool)
	case TermStart:
		w.uint(e.epoch)
		w.time(e.recoverUntil)
		w.bool(e.recovering)
		w.time(e.horizon)
	case Horizon:
		w.time(e.at)
	case Promoted:
		w.time(e.at)
		w.int(int64(e.skew))
	case TermEnd, Recovered:
	default:
		panic(fmt.Sprintf("lease store: no encoding for effect %T", e))
	}
	return w.b
}

// DecodeEffect decodes one effect EncodeEffect wrote; b must hold exactly it.
func DecodeEffect(b []byte) (Effect, error) {
	if len(b) < 2 || len(b) > maxEffectBytes || b[0] != EffectFormat {
		return nil, fmt.Errorf("%w: format %v, %d bytes", ErrUnknownEffect, b[:min(1, len(b))], len(b))
	}
	r := fieldReader{b: b[2:]}
	var e Effect
	switch Kind(b[1]) {
	case KindProxyPut:
		e = ProxyPut{info: r.proxyInfo()}
	case KindProxyDelete:
		e = ProxyDelete{key: r.name()}
	case KindGrant:
		e = Grant{lease: r.token(), tier: tierNote{key: r.budgetKey(), tier: int(r.int()), probe: r.bool(), tiered: r.bool()}, requestID: r.string()}
	case KindJoin:
		e = Join{key: r.leaseKey(), expiresAt: r.time(), ttl: time.Duration(r.int()), at: r.time()}
	case KindRenew:
		e = Renew{key: r.leaseKey(), expiresAt: r.time(), ttl: time.Duration(r.int()), at: r.time()}
	case KindEnd:
		e = End{key: r.leaseKey(), how: r.string(), at: r.time(), tombstone: leaseState(r.int())}
	case KindExpire:
		e = Expire{key: r.leaseKey()}
	case KindTombstone:
		e = Tombstone{lease: r.token(), state: leaseState(r.int())}
	case KindRelearn:
		e = Relearn{lease: r.token(), at: r.time()}
	case KindOutcomeCount:
		e = OutcomeCount{proxy: r.name(), uid: types.UID(r.string()), lease: r.leaseKey(), outcome: Outcome(r.string()),
			domain: r.string(), n: r.int(), bytes: r.int(), at: r.time()}
	case KindBan:
		e = Ban{proxy: r.name(), uid: types.UID(r.string()), domain: r.string(), owner: r.string(), at: r.time()}
	case KindCooldownLapse:
		e = CooldownLapse{key: cooldownKey{proxy: r.name(), domain: r.string()}}
	case KindCooldownDrop:
		e = CooldownDrop{key: cooldownKey{proxy: r.name(), domain: r.string()}}
	case KindSessionDrop:
		e = SessionDrop{key: r.sessionKey(), idle: r.bool()}
	case KindStatePut:
		e = StatePut{key: r.stateKey(), blob: []byte(r.string())}
	case KindPolicyPut:
		e = PolicyPut{policy: r.crawlPolicy(), at: r.time()}
	case KindPolicyDelete:
		e = PolicyDelete{key: r.name(), at: r.time()}
	case KindBudgetEvict:
		e = BudgetEvict{key: r.budgetKey()}
	case KindPoliteNote:
		e = PoliteNote{rule: r.budgetKey(), refused: r.bool()}
	case KindRefusal:
		e = Refusal{namespace: r.string(), holder: r.string(), selector: r.selector(), at: r.time()}
	case KindPoolForget:
		e = PoolForget{pool: r.name()}
	case KindTermStart:
		e = TermStart{epoch: r.uint(), recoverUntil: r.time(), recovering: r.bool(), horizon: r.time()}
	case KindTermEnd:
		e = TermEnd{}
	case KindHorizon:
		e = Horizon{at: r.time()}
	case KindRecovered:
		e = Recovered{}
	case KindPromoted:
		e = Promoted{at: r.time(), skew: time.Duration(r.int())}
	default:
		return nil, fmt.Errorf("%w: kind %d", ErrUnknownEffect, b[1])
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnknownEffect, Kind(b[1]), r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes left over", ErrUnknownEffect, Kind(b[1]), len(r.b))
	}
	return e, nil
}

// sameEffect says whether a and b encode the same: the codec writes maps
// sorted and selectors as their String(), so equal values encode equally.
func sameEffect(a, b Effect) bool {
	return bytes.Equal(EncodeEffect(nil, a), EncodeEffect(nil, b))
}

// selectorString is sel as labels.Parse reads it back; nil is everything.
func selectorString(sel labels.Selector) string {
	if sel == nil {
		return ""
	}
	return sel.String()
}

type fieldWriter struct{ b []byte }

func (w *fieldWriter) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *fieldWriter) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *fieldWriter) time(t time.Time) {
	w.int(unixNano(t))
}
func (w *fieldWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}
func (w *fieldWriter) string(s string) {
	w.uint(uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *fieldWriter) name(n ObjectName) {
	w.string(n.Namespace)
	w.string(n.Name)
}
func (w *fieldWriter) leaseKey(k leaseKey) {
	w.uint(k.epoch)
	w.uint(k.serial)
}
func (w *fieldWriter) budgetKey(k budgetKey) {
	w.string(k.namespace)
	w.string(k.policy)
	w.string(k.rule)
	w.string(k.domain)
}
func (w *fieldWriter) sessionKey(k sessionKey) {
	w.string(k.owner)
	w.string(k.namespace)
	w.string(k.session)
}
func (w *fieldWriter) token(t token) {
	w.leaseKey(t.key)
	w.int(int64(t.slot))
	w.time(t.grantedAt)
	w.time(t.expiresAt)
	w.int(int64(t.ttl))
	w.uint(t.urlHash)
	w.time(t.readySince)
	w.name(t.proxy)
	w.string(string(t.proxyUID))
	w.string(t.holder)
	w.string(t.domain)
	w.string(t.owner)
	w.string(t.session)
	w.string(t.sessionScope)
}
func (w *fieldWriter) stringMap(m map[string]string) {
	keys := slices.Sorted(maps.Keys(m))
	w.uint(uint64(len(keys)))
	for _, k := range keys {
		w.string(k)
		w.string(m[k])
	}
}
func (w *fieldWriter) proxyInfo(p ProxyInfo) {
	w.name(p.Key)
	w.string(string(p.UID))
	w.string(p.ProviderID)
	w.bool(p.Ready)
	w.string(p.URL)
	w.stringMap(p.Labels)
	w.string(p.Pool)
	w.int(p.LatencyMillis)
	w.int(int64(p.MaxLeases))
	w.time(p.ReadySince)
	w.bool(p.Draining)
	w.string(p.CredentialsSecret)
	w.string(p.ExitCountry)
}
func (w *fieldWriter) stateKey(k stateKey) {
	w.string(k.owner)
	w.name(k.proxy)
	w.string(string(k.uid))
	w.string(k.instance)
	w.string(k.domain)
}
func (w *fieldWriter) outcomes(o Outcomes) {
	w.int(o.OK)
	w.int(o.Banned)
	w.int(o.Error)
	w.int(o.TransferredBytes)
}
func (w *fieldWriter) limits(l DomainLimits) {
	w.int(int64(l.MaxConcurrent))
	w.int(int64(l.MinInterval))
	w.int(int64(l.MinIntervalPerProxy))
}
func (w *fieldWriter) crawlPolicy(p CrawlPolicy) {
	w.name(p.Key)
	hosts := slices.Sorted(maps.Keys(p.Rules))
	w.uint(uint64(len(hosts)))
	for _, h := range hosts {
		w.string(h)
		w.limits(p.Rules[h])
	}
	w.bool(p.Default != nil)
	if p.Default != nil {
		w.limits(*p.Default)
	}
	hosts = slices.Sorted(maps.Keys(p.Tiers))
	w.uint(uint64(len(hosts)))
	for _, h := range hosts {
		t := p.Tiers[h]
		w.string(h)
		w.uint(uint64(len(t.Names)))
		for i, name := range t.Names {
			w.string(name)
			w.string(selectorString(t.Selectors[i]))
		}
		w.int(int64(t.Config.Window))
		w.uint(math.Float64bits(t.Config.BanRateThreshold))
		w.int(int64(t.Config.MinOutcomes))
		w.int(int64(t.Config.QuietPeriod))
		w.uint(math.Float64bits(t.Config.ProbeShare))
	}
}

// fieldReader reads what fieldWriter wrote (and a lease ID's payload),
// remembering the first error.
type fieldReader struct {
	b   []byte
	err error
}

func (r *fieldReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad %s", what)
	}
}
func (r *fieldReader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}
func (r *fieldReader) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}
func (r *fieldReader) time() time.Time { return fromUnixNano(r.int()) }
func (r *fieldReader) bool() bool {
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail("bool")
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}
func (r *fieldReader) string() string {
	n := r.uint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail("string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
func (r *fieldReader) count() int {
	n := r.uint()
	if n > uint64(len(r.b)) { // every item takes at least a byte
		r.fail("count")
		return 0
	}
	return int(n)
}
func (r *fieldReader) name() ObjectName {
	return ObjectName{Namespace: r.string(), Name: r.string()}
}
func (r *fieldReader) leaseKey() leaseKey { return leaseKey{epoch: r.uint(), serial: r.uint()} }
func (r *fieldReader) budgetKey() budgetKey {
	return budgetKey{namespace: r.string(), policy: r.string(), rule: r.string(), domain: r.string()}
}
func (r *fieldReader) sessionKey() sessionKey {
	return sessionKey{owner: r.string(), namespace: r.string(), session: r.string()}
}
func (r *fieldReader) token() token {
	return token{key: r.leaseKey(), slot: int32(r.int()), grantedAt: r.time(), expiresAt: r.time(), ttl: time.Duration(r.int()),
		urlHash: r.uint(), readySince: r.time(), proxy: r.name(), proxyUID: types.UID(r.string()), holder: r.string(),
		domain: r.string(), owner: r.string(), session: r.string(), sessionScope: r.string()}
}
func (r *fieldReader) stringMap() map[string]string {
	n := r.count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.string()
		m[k] = r.string()
	}
	return m
}
func (r *fieldReader) selector() labels.Selector {
	s := r.string()
	sel, err := labels.Parse(s)
	if err != nil {
		r.fail("selector")
		return labels.Everything()
	}
	return sel
}
func (r *fieldReader) proxyInfo() ProxyInfo {
	return ProxyInfo{Key: r.name(), UID: types.UID(r.string()), ProviderID: r.string(), Ready: r.bool(), URL: r.string(),
		Labels: r.stringMap(), Pool: r.string(), LatencyMillis: r.int(), MaxLeases: int32(r.int()), ReadySince: r.time(),
		Draining: r.bool(), CredentialsSecret: r.string(), ExitCountry: r.string()}
}
func (r *fieldReader) stateKey() stateKey {
	return stateKey{owner: r.string(), proxy: r.name(), uid: types.UID(r.string()), instance: r.string(), domain: r.string()}
}
func (r *fieldReader) outcomes() Outcomes {
	return Outcomes{OK: r.int(), Banned: r.int(), Error: r.int(), TransferredBytes: r.int()}
}
func (r *fieldReader) limits() DomainLimits {
	return DomainLimits{MaxConcurrent: int(r.int()), MinInterval: time.Duration(r.int()), MinIntervalPerProxy: time.Duration(r.int())}
}
func (r *fieldReader) crawlPolicy() CrawlPolicy {
	p := CrawlPolicy{Key: r.name()}
	if n := r.count(); n > 0 {
		p.Rules = make(map[string]DomainLimits, n)
		for range n {
			h := r.string()
			p.Rules[h] = r.limits()
		}
	}
	if r.bool() {
		l := r.limits()
		p.Default = &l
	}
	if n := r.count(); n > 0 {
		p.Tiers = make(map[string]*Tiering, n)
		for range n {
			h := r.string()
			t := &Tiering{}
			for range r.count() {
				t.Names = append(t.Names, r.string())
				t.Selectors = append(t.Selectors, r.selector())
			}
			t.Config = tier.Config{Window: time.Duration(r.int()), BanRateThreshold: math.Float64frombits(r.uint()),
				MinOutcomes: int(r.int()), QuietPeriod: time.Duration(r.int()), ProbeShare: math.Float64frombits(r.uint())}
			p.Tiers[h] = t
		}
	}
	return p
}
