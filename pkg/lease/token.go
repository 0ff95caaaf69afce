package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// A lease ID is self-describing and unforgeable: the base64url encoding of
// everything a new leader needs to re-learn the lease from a renewal (which
// proxy, which of its slots, who holds it, until when), followed by a MAC
// with a key every replica shares. The store keeps its own state and no
// IDs: it checks the MAC of every ID presented to it, and signs a new one
// outside its lock (docs/architecture.md, decision 159).
//
// Layout (version 3):
//
//	version byte | uvarint epoch | uvarint serial | uvarint slot |
//	varint grantedAt ns | varint expiresAt ns | varint ttl ns | uvarint url hash | varint readySince ns |
//	string namespace | string name | string proxy UID | string holder | string domain | string owner |
//	mac [16]byte
//
// where a string is a uvarint length and the bytes, and mac is the
// AES-CMAC of everything before it under a key derived from the shared one
// (cmacKeyLabel). Version 2 IDs have the same fields and the first 16
// bytes of HMAC-SHA256(key, everything before it) as their MAC; they are
// still accepted, so that an upgrade keeps the old leader's leases, but
// never minted. Version 2 added the owner (the authenticated identity that
// acquired the lease); version 1 IDs are refused.
//
// An ID is signed, not encrypted (docs/architecture.md, decision 70): its
// fields are readable by anyone who sees it. It has exactly one spelling:
// decode accepts only the canonical unpadded base64url encoding, so that a
// changed character (unused padding bits, an inserted newline) is never
// the same lease.
const (
	tokenVersion = 3
	// tokenVersionHMAC IDs are checked, never minted.
	tokenVersionHMAC = 2
	macLen           = 16
	// macChars is how many characters at the end of an ID its MAC's bits
	// can reach: 128 bits are 21⅓ base64 characters, so 22, one of which may
	// also hold the last field's bits (TestMACCharsCoverTheMAC).
	macChars = (macLen*8 + 5) / 6
	// maxIDLen bounds what decode reads: the longest fields the API
	// accepts encode to well under 2 KiB.
	maxIDLen = 2048
	// MinKeyLen is the shortest key NewStore accepts.
	MinKeyLen = 32
	// cmacKeyLabel derives the AES key of version 3 MACs from the shared
	// key: HMAC-SHA256(key, label), its first 16 bytes.
	cmacKeyLabel = "crawl.proxyfleet.io lease ID MAC, version 3"
)

// strictBase64 decodes IDs: base64url, unpadded, with the unused bits of
// the last character zero. Made once: Strict copies the whole Encoding.
var strictBase64 = base64.RawURLEncoding.Strict()

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

// signer mints and checks lease IDs. It is safe for concurrent use; the
// store calls it without holding its lock.
type signer struct {
	// mac signs and checks version 3 IDs.
	mac *cmac
	// hmacKey checks version 2 IDs.
	hmacKey []byte
	// scratch pools the buffers of one encode or decode (the ID's bytes
	// before base64, or after; the base64 of an ID being minted; the MAC),
	// so that minting an ID allocates only its string.
	scratch *sync.Pool
}

type signerScratch struct {
	payload, text []byte
	// mac is where a MAC is computed (see cmac.sum).
	mac [macLen]byte
}

func newSigner(key []byte) signer {
	derive := hmac.New(sha256.New, key)
	derive.Write([]byte(cmacKeyLabel))
	mac, err := newCMAC(derive.Sum(nil)[:16])
	if err != nil {
		panic(err) // 16 bytes are always an AES key
	}
	return signer{
		mac:     mac,
		hmacKey: slices.Clone(key),
		scratch: &sync.Pool{New: func() any {
			return &signerScratch{payload: make([]byte, 0, maxIDLen), text: make([]byte, 0, maxIDLen)}
		}},
	}
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
	s.mac.sum(&sc.mac, b)
	b = append(b, sc.mac[:]...)
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

// verify decodes id into sc.payload and checks its MAC, in constant time;
// it returns the payload without the MAC.
func (s signer) verify(sc *signerScratch, id string) ([]byte, bool) {
	if len(id) == 0 || len(id) > maxIDLen {
		return nil, false
	}
	raw := sc.payload[:base64.RawURLEncoding.DecodedLen(len(id))]
	n, err := strictBase64.Decode(raw, []byte(id))
	raw = raw[:n]
	if err != nil || len(raw) < 1+macLen {
		return nil, false
	}
	// Strict still skips CR and LF; one spelling means byte-identical to
	// what encode wrote.
	if base64.RawURLEncoding.EncodedLen(len(raw)) != len(id) {
		return nil, false
	}
	payload, mac := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	switch payload[0] {
	case tokenVersion:
		s.mac.sum(&sc.mac, payload)
		return payload, subtle.ConstantTimeCompare(mac, sc.mac[:]) == 1
	case tokenVersionHMAC:
		h := hmac.New(sha256.New, s.hmacKey)
		h.Write(payload)
		return payload, hmac.Equal(mac, h.Sum(nil)[:macLen])
	}
	return nil, false
}

func (s signer) decode(id string) (token, error) {
	sc := s.scratch.Get().(*signerScratch)
	defer s.scratch.Put(sc)
	payload, ok := s.verify(sc, id)
	if !ok {
		return token{}, errBadToken
	}
	r := tokenReader{b: payload[1:]}
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

// head is decode for the usual release: the lease key of an ID of owner,
// and its namespace when namespace is not nil, without building a token
// (whose strings allocate). False wherever decode fails, and for another
// owner's ID.
func (s signer) head(id, owner string, namespace *string) (leaseKey, bool) {
	sc := s.scratch.Get().(*signerScratch)
	defer s.scratch.Put(sc)
	payload, ok := s.verify(sc, id)
	if !ok {
		return leaseKey{}, false
	}
	r := tokenReader{b: payload[1:]}
	key := leaseKey{epoch: r.uvarint(), serial: r.uvarint()}
	slot := r.uvarint()
	for range 5 { // grantedAt, expiresAt, ttl, url hash, readySince
		r.skipVarint()
	}
	ns := r.bytes()
	for range 4 { // name, proxy UID, holder, domain
		r.bytes()
	}
	gotOwner := r.bytes()
	if r.err || len(r.b) != 0 || slot > maxSlots || string(gotOwner) != owner {
		return leaseKey{}, false
	}
	if namespace != nil {
		*namespace = string(ns)
	}
	return key, true
}

// peekLeaseKey reads the lease key at the start of an ID without checking
// its MAC: enough to find the lease whose published ID the whole ID must
// then equal (releaseKnownAs). The version byte and two uvarints fit in
// the first 15 bytes, 20 characters, unless the serial passed 2^35 in the
// term; then the first 24 bytes.
func peekLeaseKey(id string) (leaseKey, bool) {
	if k, ok := peekLeaseKeyIn(id, 20); ok {
		return k, true
	}
	return peekLeaseKeyIn(id, 32)
}

func peekLeaseKeyIn(id string, chars int) (leaseKey, bool) {
	var buf [24]byte
	n := min(len(id), chars) / 4 * 4
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

// skipVarint skips a varint or uvarint.
func (r *tokenReader) skipVarint() {
	for i, c := range r.b {
		if c < 0x80 {
			if i >= binary.MaxVarintLen64 {
				break
			}
			r.b = r.b[i+1:]
			return
		}
	}
	r.err = true
}

// bytes reads a length-prefixed string, without copying it.
func (r *tokenReader) bytes() []byte {
	var n uint64
	if len(r.b) > 0 && r.b[0] < 0x80 { // the usual length, one byte
		n, r.b = uint64(r.b[0]), r.b[1:]
	} else {
		n = r.uvarint()
	}
	if r.err || n > uint64(len(r.b)) {
		r.err = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
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
