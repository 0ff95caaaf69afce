package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// A lease ID is self-describing and unforgeable: the base64url encoding of
// everything a new leader needs to re-learn the lease from a renewal (which
// proxy, which of its slots, who holds it, until when), followed by an HMAC
// with a key every replica shares. The store still keeps its own state; the
// ID matters only when a replica meets a lease it did not grant (failover).
//
// Layout (version 2):
//
//	version byte | uvarint epoch | uvarint serial | uvarint slot |
//	varint grantedAt ns | varint expiresAt ns | varint ttl ns | uvarint url hash | varint readySince ns |
//	string namespace | string name | string proxy UID | string holder | string domain | string owner |
//	mac [16]byte
//
// where a string is a uvarint length and the bytes, and mac is the first 16
// bytes of HMAC-SHA256(key, everything before it). Version 2 added the
// owner (the authenticated identity that acquired the lease); version 1 IDs
// are refused.
//
// An ID is signed, not encrypted (docs/architecture.md, decision 70): its
// fields are readable by anyone who sees it. It has exactly one spelling:
// decode accepts only the canonical unpadded base64url encoding, so that a
// changed character (unused padding bits, an inserted newline) is never
// the same lease.
const (
	tokenVersion = 2
	macLen       = 16
	// maxIDLen bounds what decodeToken reads: the longest fields the API
	// accepts encode to well under 2 KiB.
	maxIDLen = 2048
	// MinKeyLen is the shortest HMAC key NewStore accepts.
	MinKeyLen = 32
)

// errBadToken is every reason a string is not a lease ID of ours. Callers
// answer "unknown lease": an ID is opaque, and a forged one is simply unknown.
var errBadToken = errors.New("not a lease ID")

// leaseKey identifies a lease for its whole life, across renewals and
// leaders: the term it was granted in and its serial within that term.
// Keys order grants in time: a later term has a larger epoch.
type leaseKey struct {
	epoch  uint64
	serial uint64
}

func (k leaseKey) less(o leaseKey) bool {
	if k.epoch != o.epoch {
		return k.epoch < o.epoch
	}
	return k.serial < o.serial
}

// String is a short, non-secret handle for logs.
func (k leaseKey) String() string { return fmt.Sprintf("%x.%d", k.epoch, k.serial) }

// token is the content of a lease ID.
type token struct {
	key       leaseKey
	slot      int32
	grantedAt time.Time
	expiresAt time.Time
	ttl       time.Duration
	// urlHash fingerprints the proxy URL the lease was granted with, so that
	// a new leader does not re-learn a lease on a replaced instance.
	urlHash uint64
	// readySince is when the proxy had last become Ready at the grant: if it
	// differs now, the proxy was not Ready in between and the lease was revoked.
	readySince time.Time
	proxy      cache.ObjectName
	proxyUID   types.UID
	holder     string
	domain     string
	// owner is the identity that acquired the lease (see User.Identity);
	// only it may renew, release or read the lease.
	owner string
}

// signer mints and checks lease IDs with one HMAC key.
type signer struct {
	// macs pools keyed HMAC states: keying one costs as much as the MAC.
	macs *sync.Pool
}

func newSigner(key []byte) signer {
	key = slices.Clone(key)
	return signer{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

func (s signer) mac(payload []byte) []byte {
	h := s.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(payload)
	sum := h.Sum(nil)[:macLen]
	s.macs.Put(h)
	return sum
}

func (s signer) encode(t token) string {
	b := make([]byte, 0, 96+len(t.proxy.Namespace)+len(t.proxy.Name)+len(t.proxyUID)+len(t.holder)+len(t.domain)+len(t.owner))
	b = append(b, tokenVersion)
	b = binary.AppendUvarint(b, t.key.epoch)
	b = binary.AppendUvarint(b, t.key.serial)
	b = binary.AppendUvarint(b, uint64(t.slot))
	b = binary.AppendVarint(b, t.grantedAt.UnixNano())
	b = binary.AppendVarint(b, t.expiresAt.UnixNano())
	b = binary.AppendVarint(b, int64(t.ttl))
	b = binary.AppendUvarint(b, t.urlHash)
	b = binary.AppendVarint(b, unixNano(t.readySince))
	for _, str := range []string{t.proxy.Namespace, t.proxy.Name, string(t.proxyUID), t.holder, t.domain, t.owner} {
		b = binary.AppendUvarint(b, uint64(len(str)))
		b = append(b, str...)
	}
	b = append(b, s.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s signer) decode(id string) (token, error) {
	if len(id) == 0 || len(id) > maxIDLen {
		return token{}, errBadToken
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(id)
	if err != nil || len(raw) < 1+macLen {
		return token{}, errBadToken
	}
	// Strict still skips CR and LF; one spelling means byte-identical to
	// what encode wrote.
	if base64.RawURLEncoding.EncodedLen(len(raw)) != len(id) {
		return token{}, errBadToken
	}
	payload, mac := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	if !hmac.Equal(mac, s.mac(payload)) {
		return token{}, errBadToken
	}
	r := tokenReader{b: payload}
	if r.byte() != tokenVersion {
		return token{}, errBadToken
	}
	var t token
	t.key.epoch = r.uvarint()
	t.key.serial = r.uvarint()
	slot := r.uvarint()
	t.grantedAt = time.Unix(0, r.varint())
	t.expiresAt = time.Unix(0, r.varint())
	t.ttl = time.Duration(r.varint())
	t.urlHash = r.uvarint()
	t.readySince = fromUnixNano(r.varint())
	t.proxy.Namespace = r.string()
	t.proxy.Name = r.string()
	t.proxyUID = types.UID(r.string())
	t.holder = r.string()
	t.domain = r.string()
	t.owner = r.string()
	// A valid MAC means we wrote it, so these only fail for a key shared
	// with a different program; still, never trust lengths blindly.
	if r.err || len(r.b) != 0 || slot > maxSlots {
		return token{}, errBadToken
	}
	t.slot = int32(slot)
	return t, nil
}

// urlHash is the fingerprint of a proxy URL kept in lease IDs.
func urlHash(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64()
}

// unixNano keeps the zero time distinct from the Unix epoch.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// tokenReader reads the fields of a payload, remembering the first error.
type tokenReader struct {
	b   []byte
	err bool
}

func (r *tokenReader) byte() byte {
	if len(r.b) == 0 {
		r.err = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *tokenReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *tokenReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *tokenReader) string() string {
	n := r.uvarint()
	if r.err || n > uint64(len(r.b)) {
		r.err = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
