package store

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
)

// A lease ID is self-describing and unforgeable: the base64url encoding of
// everything a new leader needs to re-learn the lease from a renewal (which
// proxy, which of its slots, who holds it, until when), followed by a MAC
// with a key every replica shares. The store keeps its own state and no
// IDs: it checks the MAC of every ID presented to it, and signs a new one
// outside its lock.
//
// Layout (version 2):
//
//	version byte | uvarint epoch | uvarint serial | uvarint slot |
//	varint grantedAt ns | varint expiresAt ns | varint ttl ns | uvarint url hash | varint readySince ns |
//	string namespace | string name | string proxy UID | string holder | string domain | string owner |
//	mac [16]byte
//
// Version 4 is version 2 followed by two strings, the session and its scope
// (the acquire's namespace), so that a new leader re-learns which lease a
// session holds (docs/decisions/0188-gateway-tier.md). It is minted for
// session leases only; every other lease keeps version 2, which the
// releases before it read.
//
// where a string is a uvarint length and the bytes, and mac is the first
// 16 bytes of HMAC-SHA256(key, everything before it). Version 2 added the
// owner (the authenticated identity that acquired the lease); version 1
// IDs are refused, and so are version 3 IDs (an AES-CMAC, minted for two
// days by the releases of docs/decisions/0159-lease-ids-version-3-signed-aes.md):
// every one of them has expired
// (docs/decisions/0270-version-3-lease-ids-no-longer-verified.md).
//
// An ID is signed, not encrypted (docs/decisions/0070-lease-ids-signed-not-encrypted-docs.md): its
// fields are readable by anyone who sees it. It has exactly one spelling:
// decode accepts only the canonical unpadded base64url encoding, so that a
// changed character (unused padding bits, an inserted newline) is never
// the same lease.
const (
	tokenVersion = 2
	// tokenVersionSession is version 2 with the session appended.
	tokenVersionSession = 4
	macLen              = 16
	// maxIDLen bounds what decode reads: the longest fields the API
	// accepts encode to well under 2 KiB.
	maxIDLen = 2048
	// MinKeyLen is the shortest key New accepts.
	MinKeyLen = 32
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
func (k leaseKey) String() string { return k.ref().String() }

func (k leaseKey) ref() LeaseRef { return LeaseRef{Epoch: k.epoch, Serial: k.serial} }

// LeaseRef names a lease for its whole life, across renewals and leaders,
// without being a secret: the term it was granted in and its serial there.
// A lease's credentials name it (pkg/leasecred), so that an instance told
// the lease ended refuses every credential of it.
type LeaseRef struct {
	Epoch, Serial uint64
}

// String is epoch (hex) "." serial, as logs and the push to instances write it.
func (r LeaseRef) String() string { return fmt.Sprintf("%x.%d", r.Epoch, r.Serial) }

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
	proxy      ObjectName
	proxyUID   types.UID
	holder     string
	domain     string
	// owner is the identity that acquired the lease (see User.Identity);
	// only it may renew, release or read the lease.
	owner string
	// session and sessionScope are the acquire's Session and Namespace
	// (version 4 only).
	session, sessionScope string
}

// signer mints and checks lease IDs. It is safe for concurrent use; the
// store calls it without holding its lock.
type signer struct {
	// macs holds keyed HMAC-SHA256 states: keying one costs six
	// allocations, two thirds of a store pair's (BenchmarkStoreOps).
	macs *sync.Pool
}

func newSigner(key []byte) signer {
	key = slices.Clone(key)
	macs := &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
	return signer{macs: macs}
}

func (s signer) encode(t token) string {
	b := make([]byte, 0, 256)
	version := byte(tokenVersion)
	if t.session != "" {
		version = tokenVersionSession
	}
	b = append(b, version)
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
	if version == tokenVersionSession {
		b = appendString(b, t.session)
		b = appendString(b, t.sessionScope)
	}
	b = append(b, s.hmac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s signer) hmac(payload []byte) []byte {
	h := s.macs.Get().(hash.Hash)
	defer s.macs.Put(h)
	h.Reset()
	h.Write(payload)
	var sum [sha256.Size]byte
	return h.Sum(sum[:0])[:macLen]
}

func appendString(b []byte, str string) []byte {
	b = binary.AppendUvarint(b, uint64(len(str)))
	return append(b, str...)
}

// verify decodes id and checks its MAC, in constant time; it returns the
// payload without the MAC.
func (s signer) verify(id string) ([]byte, bool) {
	if len(id) == 0 || len(id) > maxIDLen {
		return nil, false
	}
	raw, err := strictBase64.DecodeString(id)
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
	case tokenVersion, tokenVersionSession:
		return payload, hmac.Equal(mac, s.hmac(payload))
	}
	return nil, false
}

func (s signer) decode(id string) (token, error) {
	payload, ok := s.verify(id)
	if !ok {
		return token{}, errBadToken
	}
	r := fieldReader{b: payload[1:]}
	var t token
	t.key.epoch = r.uint()
	t.key.serial = r.uint()
	slot := r.uint()
	t.grantedAt = time.Unix(0, r.int())
	t.expiresAt = time.Unix(0, r.int())
	t.ttl = time.Duration(r.int())
	t.urlHash = r.uint()
	t.readySince = fromUnixNano(r.int())
	t.proxy.Namespace = r.string()
	t.proxy.Name = r.string()
	t.proxyUID = types.UID(r.string())
	t.holder = r.string()
	t.domain = r.string()
	t.owner = r.string()
	if payload[0] == tokenVersionSession {
		t.session, t.sessionScope = r.string(), r.string()
	}
	// A valid MAC means we wrote it, so these only fail for a key shared
	// with a different program; still, never trust lengths blindly.
	if r.err != nil || len(r.b) != 0 || slot > maxSlots {
		return token{}, errBadToken
	}
	t.slot = int32(slot)
	return t, nil
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

// decodeOwned decodes a lease ID that owner may use: an ID that is not
// ours, and one of another owner, are both ErrUnknownLease, so that nobody
// learns whether another's lease exists.
func (s signer) decodeOwned(owner, id string) (token, error) {
	tok, err := s.decode(id)
	if err != nil || tok.owner != owner {
		return token{}, ErrUnknownLease
	}
	return tok, nil
}

// withID is view with the ID of tok. Sign after unlocking the store: the
// lock is held only for the store's own work.
func (s signer) withID(view Lease, tok token) Lease {
	view.ID = s.encode(tok)
	return view
}
