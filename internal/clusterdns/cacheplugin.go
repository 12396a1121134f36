package clusterdns

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// The emulation of CoreDNS's cache plugin (Config.Cache). Each fact below
// is the plugin's, from plugin/cache (cache.go, handler.go, item.go,
// setup.go), plugin/pkg/cache and plugin/pkg/dnsutil/ttl.go.

// Defaults and fixed values of the cache plugin.
const (
	cacheShards          = 256   // plugin/pkg/cache: shards per cache
	minShardSize         = 4     // a shard holds at least 4 replies
	defaultCacheCapacity = 10000 // "success"/"denial" CAPACITY default

	defaultSuccessMaxTTL = 3600 // seconds: dnsutil.MaximumDefaultTTL
	defaultDenialMaxTTL  = 1800 // seconds: half of it
	defaultCacheMinTTL   = 5    // seconds: dnsutil.MinimalDefaultTTL
	servfailTTL          = 5    // seconds: the "servfail" default
	emptyReplyTTL        = 5    // seconds: a reply without records
)

// cacheSettings is a CacheConfig with defaults applied.
type cacheSettings struct {
	success, denial classSettings
	keepTTL         bool
}

// classSettings is a CacheClass with defaults applied.
type classSettings struct {
	shardSize      int
	maxTTL, minTTL uint32   // seconds
	disable        []string // zones not kept, lower case, fully qualified
}

// settings applies the defaults; nil stays nil (no cache plugin).
func (c *CacheConfig) settings() (*cacheSettings, error) {
	if c == nil {
		return nil, nil
	}
	success, err := c.Success.settings("success", defaultSuccessMaxTTL)
	if err != nil {
		return nil, err
	}
	denial, err := c.Denial.settings("denial", defaultDenialMaxTTL)
	if err != nil {
		return nil, err
	}
	return &cacheSettings{success: success, denial: denial, keepTTL: c.KeepTTL}, nil
}

func (c CacheClass) settings(name string, defaultMax uint32) (classSettings, error) {
	switch {
	case c.Capacity < 0:
		return classSettings{}, fmt.Errorf("clusterdns: cache %s capacity %d is negative", name, c.Capacity)
	case c.MaxTTL < 0:
		return classSettings{}, fmt.Errorf("clusterdns: cache %s TTL %v is negative", name, c.MaxTTL)
	case c.MaxTTL > time.Duration(1<<31-1)*time.Second || c.MinTTL > time.Duration(1<<31-1)*time.Second:
		return classSettings{}, fmt.Errorf("clusterdns: cache %s TTLs must be below 2^31 seconds", name)
	}
	st := classSettings{
		shardSize: max(cmp.Or(c.Capacity, defaultCacheCapacity)/cacheShards, minShardSize),
		maxTTL:    uint32(c.MaxTTL / time.Second),
		minTTL:    uint32(max(c.MinTTL, 0) / time.Second),
	}
	if c.MaxTTL == 0 {
		st.maxTTL = defaultMax
	}
	for _, z := range c.Disable {
		st.disable = append(st.disable, dns.CanonicalName(z))
	}
	if c.MinTTL == 0 {
		st.minTTL = defaultCacheMinTTL
	}
	return st, nil
}

// answerSet is a reply's rcode and sections before the per-reply shuffle.
type answerSet struct {
	rcode                 int
	answer, ns, extra     []dns.RR
	answerTail, extraTail int  // index of the first address record (see shuffle.go)
	wireLen               int  // uncompressed wire length of the records
	owned                 bool // answer is this reply's own copy
}

// question is what the cache plugin keys a reply by.
type question struct {
	name          string // as asked
	qtype, qclass uint16
	do, cd        bool
}

// pluginCache is the cache plugin: a success and a denial cache.
type pluginCache struct {
	cfg             cacheSettings
	success, denial replyCache
}

func newPluginCache(cfg *cacheSettings) *pluginCache {
	if cfg == nil {
		return nil
	}
	c := &pluginCache{cfg: *cfg}
	c.success.init(cfg.success.shardSize)
	c.denial.init(cfg.denial.shardSize)
	return c
}

// through answers q from a stored reply while one is unexpired, else from
// build, whose reply it stores (handler.go and cache.go's WriteMsg). ok
// false from build (REFUSED) passes through unstored.
func (c *pluginCache) through(q question, build func() (answerSet, bool)) (answerSet, bool) {
	key, t := cacheKey(q), now()
	if r := c.lookup(key, q, t); r != nil {
		return r.at(t, c.cfg.keepTTL), true
	}
	set, ok := build()
	if !ok {
		return set, false
	}
	kind, keep := classify(set, q.qtype)
	ttl := c.keepFor(set, kind)
	set = withTTL(set, ttl)
	if keep && ttl > 0 && !c.disabled(kind, q.name) {
		r := &cachedReply{set: set, name: q.name, qtype: q.qtype, qclass: q.qclass, ttl: ttl, stored: t}
		switch kind {
		case replyPositive:
			c.success.add(key, r)
		case replyNegative, replyFailure:
			c.denial.add(key, r)
		}
	}
	return set, true
}

// disabled reports whether name is in a zone whose replies of kind are
// not kept ("disable success|denial ZONES": cache.go's set checks
// pexcept for NOERROR replies, nexcept for NXDOMAIN, NODATA and
// SERVFAIL, after WriteMsg has capped the TTLs).
func (c *pluginCache) disabled(kind replyKind, name string) bool {
	zones := c.cfg.success.disable
	if kind == replyNegative || kind == replyFailure {
		zones = c.cfg.denial.disable
	}
	for _, z := range zones {
		if dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

// lookup returns the unexpired reply stored for q, looking in the denial
// cache first; a SERVFAIL there yields to an unexpired positive reply.
func (c *pluginCache) lookup(key uint64, q question, t time.Time) *cachedReply {
	if r := c.denial.get(key); r.fresh(q, t) {
		if p := c.success.get(key); r.set.rcode == dns.RcodeServerFailure && p.fresh(q, t) {
			return p
		}
		return r
	}
	if r := c.success.get(key); r.fresh(q, t) {
		return r
	}
	return nil
}

// replyKind is how the plugin classifies a reply (response.Typify, with
// the cache's own rules): it picks the TTL caps.
type replyKind uint8

const (
	replyOther    replyKind = iota // anything else: never kept
	replyPositive                  // NOERROR
	replyNegative                  // NXDOMAIN, or NODATA with an SOA
	replyFailure                   // SERVFAIL
)

// classify sorts a reply as the cache does and tells whether it may be
// kept. A NOERROR answer that does not answer the question (an
// ExternalName's CNAME to a name outside the zone, alone, as there is no
// upstream) counts as NODATA if it has an SOA and is not kept otherwise
// (RFC 2308 section 5); an NXDOMAIN without an SOA is not kept either.
func classify(set answerSet, qtype uint16) (kind replyKind, keep bool) {
	soa := hasSOA(set.ns)
	switch set.rcode {
	case dns.RcodeServerFailure:
		return replyFailure, true
	case dns.RcodeNameError:
		if len(set.answer) > 0 {
			return replyOther, false
		}
		return replyNegative, soa
	case dns.RcodeSuccess:
		switch {
		case len(set.answer) == 0 && soa:
			return replyNegative, true
		case len(set.answer) == 0, answers(set.answer, qtype):
			return replyPositive, true
		case soa:
			return replyNegative, true
		}
		return replyPositive, false
	}
	return replyOther, false
}

// keepFor returns how long, in seconds, the plugin keeps a reply of kind,
// which is also the TTL of every record sent in it: the smallest record
// TTL (starting from the cap), raised to the minimum, capped at the
// maximum; 5s for SERVFAIL.
func (c *pluginCache) keepFor(set answerSet, kind replyKind) uint32 {
	class := c.cfg.success
	switch kind {
	case replyFailure:
		return servfailTTL
	case replyNegative:
		class = c.cfg.denial
	}
	ttl := uint32(emptyReplyTTL)
	if kind != replyOther && len(set.answer)+len(set.ns)+len(set.extra) > 0 {
		ttl = class.maxTTL
		for _, sec := range [][]dns.RR{set.answer, set.ns, set.extra} {
			for _, rr := range sec {
				ttl = min(ttl, rr.Header().Ttl)
			}
		}
	}
	return min(max(ttl, class.minTTL), class.maxTTL)
}

func hasSOA(ns []dns.RR) bool {
	for _, rr := range ns {
		if rr.Header().Rrtype == dns.TypeSOA {
			return true
		}
	}
	return false
}

// answers reports whether a non-empty answer section holds a record of
// qtype at the end of the CNAME chain from its first owner (the question's
// name), as the plugin's answersQuestion: a CNAME query is answered by the
// CNAME, ANY by any record at the name.
func answers(answer []dns.RR, qtype uint16) bool {
	name := answer[0].Header().Name
	if qtype == dns.TypeANY {
		return true
	}
	for range len(answer) + 1 {
		next := ""
		for _, rr := range answer {
			h := rr.Header()
			switch {
			case !strings.EqualFold(h.Name, name):
			case h.Rrtype == qtype:
				return true
			case h.Rrtype == dns.TypeCNAME:
				next = rr.(*dns.CNAME).Target
			}
		}
		if next == "" {
			return false
		}
		name = next
	}
	return false // a loop
}

// withTTL returns set with every record a copy carrying ttl, as the plugin
// sends replies (filterRRSlice). The copies are shared: set.owned is false.
func withTTL(set answerSet, ttl uint32) answerSet {
	set.answer, set.ns, set.extra = stamp(set.answer, ttl), stamp(set.ns, ttl), stamp(set.extra, ttl)
	set.owned = false
	return set
}

func stamp(rrs []dns.RR, ttl uint32) []dns.RR {
	if len(rrs) == 0 {
		return nil
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		if rr.Header().Ttl == ttl {
			out[i] = rr // records are never modified: share it
			continue
		}
		out[i] = dns.Copy(rr)
		out[i].Header().Ttl = ttl
	}
	return out
}

// cachedReply is a stored reply (the plugin's item). Its records carry the
// TTL it was stored with and are never modified.
type cachedReply struct {
	set           answerSet
	name          string // the question's name as first asked: the owner case of its records
	qtype, qclass uint16
	ttl           uint32 // seconds
	stored        time.Time

	// stamped is set with the TTL last served, reused while that TTL
	// holds, so that a busy name costs one copy of its records per second.
	stamped atomic.Pointer[stampedSet]
}

type stampedSet struct {
	ttl uint32
	set answerSet
}

// remaining is the plugin's item.ttl: the stored TTL minus the whole
// seconds since the reply was stored.
func (r *cachedReply) remaining(t time.Time) int {
	return int(r.ttl) - int(t.Sub(r.stored).Seconds())
}

// fresh reports whether r is a reply to q (the key is a hash) that has
// not expired.
func (r *cachedReply) fresh(q question, t time.Time) bool {
	return r != nil && r.qtype == q.qtype && r.qclass == q.qclass &&
		strings.EqualFold(r.name, q.name) && r.remaining(t) > 0
}

// at returns the reply as served at t: its records with the remaining
// TTL, or the stored one with keepTTL.
func (r *cachedReply) at(t time.Time, keepTTL bool) answerSet {
	ttl := r.ttl
	if !keepTTL {
		ttl = uint32(r.remaining(t))
	}
	if s := r.stamped.Load(); s != nil && s.ttl == ttl {
		return s.set
	}
	set := withTTL(r.set, ttl)
	r.stamped.Store(&stampedSet{ttl: ttl, set: set})
	return set
}

// cacheKey is the plugin's key: the 64-bit FNV-1 hash of the DO and CD
// bits ("1" or "0" each), the type and class (big endian) and the name in
// lower case.
func cacheKey(q question) uint64 {
	h := fnv.New64()
	bit := func(b bool) []byte {
		if b {
			return []byte("1")
		}
		return []byte("0")
	}
	h.Write(bit(q.do))
	h.Write(bit(q.cd))
	var tc [4]byte
	binary.BigEndian.PutUint16(tc[:2], q.qtype)
	binary.BigEndian.PutUint16(tc[2:], q.qclass)
	h.Write(tc[:])
	h.Write([]byte(strings.ToLower(q.name)))
	return h.Sum64()
}

// replyCache is one of the plugin's caches: 256 shards chosen by the low
// bits of the key, each holding up to its size and dropping a random
// reply for a new key when full.
type replyCache struct {
	shards [cacheShards]replyShard
}

type replyShard struct {
	mu    sync.RWMutex
	items map[uint64]*cachedReply
	size  int
}

func (c *replyCache) init(shardSize int) {
	for i := range c.shards {
		c.shards[i] = replyShard{items: map[uint64]*cachedReply{}, size: shardSize}
	}
}

func (c *replyCache) get(key uint64) *cachedReply {
	s := &c.shards[key%cacheShards]
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.items[key]
}

func (c *replyCache) add(key uint64, r *cachedReply) {
	s := &c.shards[key%cacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[key]; !ok && len(s.items) >= s.size {
		for k := range s.items { // map order: a random victim
			delete(s.items, k)
			break
		}
	}
	s.items[key] = r
}

// len returns the number of replies held, expired ones included.
func (c *replyCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.items)
		s.mu.RUnlock()
	}
	return n
}
