package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
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
	// macChars is how many characters at the end of an ID its MAC's bits
	// can reach: 128 bits are 21⅓ base64 characters, so 22, one of which may
	// also hold the last field's bits (TestMACCharsCoverTheMAC).
	macChars = (macLen*8 + 5) / 6
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
	// scratch pools what one encode or decode needs: a keyed HMAC state
	// (keying one costs as much as the MAC) and the buffers it reads and
	// writes. The buffers live on the heap with their state, so that the
	// hash.Hash interface, which moves every buffer it is given to the
	// heap, allocates nothing per ID (docs/architecture.md, decision 110).
	scratch *sync.Pool
}

type signerScratch struct {
	mac hash.Hash
	// payload holds an ID's bytes before base64 (encode) or after (decode);
	// sum the MAC; text the base64 of an ID being minted.
	payload, sum, text []byte
}

func newSigner(key []byte) signer {
	key = slices.Clone(key)
	return signer{scratch: &sync.Pool{New: func() any {
		return &signerScratch{
			mac:     hmac.New(sha256.New, key),
			payload: make([]byte, 0, maxIDLen),
			sum:     make([]byte, 0, sha256.Size),
			text:    make([]byte, 0, maxIDLen),
		}
	}}}
}

// mac is the first macLen bytes of HMAC-SHA256(key, payload), in sc.sum.
func (sc *signerScratch) macOf(payload []byte) []byte {
	sc.mac.Reset()
	sc.mac.Write(payload)
	sc.sum = sc.mac.Sum(sc.sum[:0])
	return sc.sum[:macLen]
}

func (s signer) encode(t token) string {
	sc := s.scratch.Get().(*signerScratch)
	defer s.scratch.Put(sc)
	b := sc.payload[:0]
	b = append(b, tokenVersion)
	b = binary.AppendUvarint(b, t.key.epoch)
	b = binary.AppendUvarint(b, t.key.serial)
	b = binary.AppendUvarint(b, uint64(t.slot))
	b = binary.AppendVarint(b, t.grantedAt.UnixNano())
	b = binary.AppendVarint(b, t.expiresAt.UnixNano())
	b = binary.AppendVarint(b, int64(t.ttl))
	b = binary.AppendUvarint(b, t.urlHash)
	b = binary.AppendVarint(b, unixNano(t.readySince))
	b = appendString(b, t.proxy.Namespace)
	b = appendString(b, t.proxy.Name)
	b = appendString(b, string(t.proxyUID))
	b = appendString(b, t.holder)
	b = appendString(b, t.domain)
	b = appendString(b, t.owner)
	b = append(b, sc.macOf(b)...)
	sc.payload = b[:0]
	n := base64.RawURLEncoding.EncodedLen(len(b))
	sc.text = slices.Grow(sc.text[:0], n)[:n]
	base64.RawURLEncoding.Encode(sc.text, b)
	return string(sc.text)
}

func appendString(b []byte, str string) []byte {
	b = binary.AppendUvarint(b, uint64(len(str)))
	return append(b, str...)
}

func (s signer) decode(id string) (token, error) {
	if len(id) == 0 || len(id) > maxIDLen {
		return token{}, errBadToken
	}
	sc := s.scratch.Get().(*signerScratch)
	defer s.scratch.Put(sc)
	raw := sc.payload[:base64.RawURLEncoding.DecodedLen(len(id))]
	n, err := base64.RawURLEncoding.Strict().Decode(raw, []byte(id))
	raw = raw[:n]
	if err != nil || len(raw) < 1+macLen {
		return token{}, errBadToken
	}
	// Strict still skips CR and LF; one spelling means byte-identical to
	// what encode wrote.
	if base64.RawURLEncoding.EncodedLen(len(raw)) != len(id) {
		return token{}, errBadToken
	}
	payload, mac := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	if !hmac.Equal(mac, sc.macOf(payload)) {
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
	if r.err {
		return token{}, errBadToken
	}
	texts := textReader{s: string(r.b)}
	t.proxy.Namespace = texts.string()
	t.proxy.Name = texts.string()
	t.proxyUID = types.UID(texts.string())
	t.holder = texts.string()
	t.domain = texts.string()
	t.owner = texts.string()
	// A valid MAC means we wrote it, so these only fail for a key shared
	// with a different program; still, never trust lengths blindly.
	if texts.err || len(texts.s) != 0 || slot > maxSlots {
		return token{}, errBadToken
	}
	t.slot = int32(slot)
	return t, nil
}

// peekLeaseKey reads the lease key at the start of an ID without checking
// its MAC: enough to find the lease whose kept ID the whole ID must then
// equal (releaseKnownAs). The version byte and two uvarints fit in the
// first 24 bytes, the first 32 characters.
func peekLeaseKey(id string) (leaseKey, bool) {
	var buf [24]byte
	n := min(len(id), 32) / 4 * 4
	if n == 0 {
		return leaseKey{}, false
	}
	m, err := base64.RawURLEncoding.Decode(buf[:], []byte(id[:n]))
	if err != nil {
		return leaseKey{}, false
	}
	r := tokenReader{b: buf[:m]}
	if r.byte() != tokenVersion {
		return leaseKey{}, false
	}
	k := leaseKey{epoch: r.uvarint(), serial: r.uvarint()}
	return k, !r.err
}

// urlHash is the fingerprint of a proxy URL kept in lease IDs: FNV-1a, 64 bits.
func urlHash(url string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(url); i++ {
		h ^= uint64(url[i])
		h *= prime64
	}
	return h
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

// textReader reads the length-prefixed strings at the end of a payload
// from one copy of it, so that the token's text fields share one
// allocation.
type textReader struct {
	s   string
	err bool
}

func (r *textReader) string() string {
	var n uint64
	for shift, i := 0, 0; ; shift, i = shift+7, i+1 {
		if i == len(r.s) || i == binary.MaxVarintLen64 {
			r.err = true
			return ""
		}
		c := r.s[i]
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.s = r.s[i+1:]
			break
		}
	}
	if r.err || n > uint64(len(r.s)) {
		r.err = true
		return ""
	}
	out := r.s[:n]
	r.s = r.s[n:]
	return out
}
