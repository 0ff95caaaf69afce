// Package leasecred is the format of a lease's credentials on an instance
// that checks them: the instance's lease key (random, one per instance,
// kept in its credentials Secret under the key lease-key) signs a password
// that names the lease and its end, for one username (a session member's
// is its instance's username plus "+session-<id>", so the signature binds
// the exit). The lease API signs; our forward-proxy verifies, without
// calling anyone; the operator's pushes of ended and extended leases to the
// instance are signed with the same key
// (docs/decisions/0400-a-lease-is-a-key.md).
//
// A password is the unpadded base64url encoding of
//
//	version byte (1) | key id [4]byte | uvarint epoch | uvarint serial | varint end (Unix ms) | mac [16]byte
//
// where mac is the first 16 bytes of HMAC-SHA256(key, "proxy-operator
// lease credential v1" NUL username NUL everything before it), the lease ID
// signing's house style (pkg/lease/store/token.go) with a key of the
// instance's own. Epoch and serial are the lease's store.LeaseRef, which is
// no secret; the zero ref names no lease (the operator's own probe).
//
// It imports nothing of the project: the forward-proxy binary links it.
package leasecred

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// KeyLen is the length of a lease key, in bytes (before base64url).
	KeyLen = 32
	// SecretKey is the key of a credentials Secret's data that holds the
	// instance's lease keys, one base64url key a line, the first signing.
	SecretKey = "lease-key"

	version     = 1
	keyIDLen    = 4
	macLen      = 16
	maxPassword = 128 // the longest password Verify decodes

	credentialContext = "proxy-operator lease credential v1\x00"
	pushContext       = "proxy-operator lease push v1\x00"
	keyIDContext      = "proxy-operator lease key id v1\x00"
)

// ErrNotSigned says a password is not a lease credential of any of the
// keys: a static password, another instance's credential, a forgery.
var ErrNotSigned = errors.New("not a lease credential of this instance")

// strict decodes passwords: base64url without padding, unused bits zero.
var strict = base64.RawURLEncoding.Strict()

// Key is one parsed lease key, safe for concurrent use.
type Key struct {
	id   [keyIDLen]byte
	macs *sync.Pool // keyed HMAC-SHA256 states: keying one costs allocations
}

// NewKeyText is a new random key as a Secret holds it: base64url, no padding.
func NewKeyText() (string, error) {
	b := make([]byte, KeyLen)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a lease key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseKeys reads keys as a Secret's lease-key, $PROXY_LEASE_KEYS or a
// --lease-key-file holds them: base64url keys (padded or not) separated by
// white space, lines starting with # ignored. The first key signs; all of
// them verify, so that an instance can take a new key before the operator
// signs with it. Errors name the key's place, never a key.
func ParseKeys(text string) ([]Key, error) {
	var keys []Key
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, field := range strings.Fields(line) {
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(field, "="))
			if err != nil || len(raw) != KeyLen {
				return nil, fmt.Errorf("lease key %d (line %d): want %d random bytes in base64url (head -c %d /dev/urandom | basenc --base64url)", len(keys)+1, i+1, KeyLen, KeyLen)
			}
			keys = append(keys, newKey(raw))
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no lease key: want base64url keys separated by white space")
	}
	return keys, nil
}

func newKey(raw []byte) Key {
	raw = slices.Clone(raw)
	sum := sha256.Sum256(append([]byte(keyIDContext), raw...))
	k := Key{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, raw) }}}
	copy(k.id[:], sum[:keyIDLen])
	return k
}

// ID is the key's identifier: 8 hex digits of a hash of it, no secret. An
// instance announces the IDs of its keys (KeysHeader), so that the
// operator knows it checks credentials signed with them.
func (k Key) ID() string { return hex.EncodeToString(k.id[:]) }

// KeysHeader names, in an instance's answers to the operator's own
// credentials (the opening of a tunnel, a forwarded response), the IDs of
// its lease keys, comma-separated: the health engine learns from it that
// the instance checks lease credentials, and with which keys.
const KeysHeader = "Proxy-Lease-Keys"

// Announces reports whether an instance's KeysHeader value names k.
func Announces(header string, k Key) bool {
	id := k.ID()
	for a := range strings.SplitSeq(header, ",") {
		if strings.TrimSpace(a) == id {
			return true
		}
	}
	return false
}

// KeyCache parses each Secret's keys once: the lease API and the health
// engine sign with the keys of the same few Secrets again and again, and a
// parse keys a new HMAC state. It is safe for concurrent use; its size is
// bounded (it starts afresh beyond maxCachedKeySets texts).
type KeyCache struct {
	mu   sync.Mutex
	sets map[string][]Key
}

const maxCachedKeySets = 1 << 14

// Parse is ParseKeys(text), from the cache when it was parsed before.
func (c *KeyCache) Parse(text string) ([]Key, error) {
	c.mu.Lock()
	keys, ok := c.sets[text]
	c.mu.Unlock()
	if ok {
		return keys, nil
	}
	keys, err := ParseKeys(text)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sets == nil || len(c.sets) >= maxCachedKeySets {
		c.sets = map[string][]Key{}
	}
	c.sets[text] = keys
	return keys, nil
}

// mac appends the first macLen bytes of HMAC-SHA256(k, msg) to dst.
func (k Key) mac(dst, msg []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	defer k.macs.Put(h)
	h.Reset()
	h.Write(msg)
	var sum [sha256.Size]byte
	return append(dst, h.Sum(sum[:0])[:macLen]...)
}

// credentialMAC appends the MAC of a credential's payload for username.
func (k Key) credentialMAC(dst []byte, username string, payload []byte) []byte {
	msg := make([]byte, 0, len(credentialContext)+len(username)+1+len(payload))
	msg = append(msg, credentialContext...)
	msg = append(msg, username...)
	msg = append(msg, 0)
	msg = append(msg, payload...)
	return k.mac(dst, msg)
}

// Ref names a lease (store.LeaseRef's fields); the zero Ref names none.
type Ref struct {
	Epoch, Serial uint64
}

// IsZero: no lease, the operator's own short credential.
func (r Ref) IsZero() bool { return r == Ref{} }

// String is epoch (hex) "." serial, as the lease store writes it.
func (r Ref) String() string {
	return strconv.FormatUint(r.Epoch, 16) + "." + strconv.FormatUint(r.Serial, 10)
}

// ParseRef reads a Ref as String writes it.
func ParseRef(s string) (Ref, error) {
	e, n, ok := strings.Cut(s, ".")
	epoch, err1 := strconv.ParseUint(e, 16, 64)
	serial, err2 := strconv.ParseUint(n, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Ref{}, fmt.Errorf("lease ref %q: want <hex epoch>.<serial>", truncate(s))
	}
	return Ref{Epoch: epoch, Serial: serial}, nil
}

// Claims are what a credential says: which lease, until when.
type Claims struct {
	Ref Ref
	// End is when the credential stops admitting anything: the lease's
	// expiry when it was signed, in milliseconds.
	End time.Time
}

// Sign is the password for username under c, signed with k.
func Sign(k Key, username string, c Claims) string {
	b := make([]byte, 0, 48)
	b = append(b, version)
	b = append(b, k.id[:]...)
	b = binary.AppendUvarint(b, c.Ref.Epoch)
	b = binary.AppendUvarint(b, c.Ref.Serial)
	b = binary.AppendVarint(b, c.End.UnixMilli())
	b = k.credentialMAC(b, username, b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Verify checks that password is a credential for username signed with
// one of keys and returns its claims; ErrNotSigned when it is not. It
// checks the signature only: the caller compares End with its clock and
// the ref with the leases it was told ended.
func Verify(keys []Key, username, password string) (Claims, error) {
	if len(password) > maxPassword || len(password) < base64.RawURLEncoding.EncodedLen(1+keyIDLen+3+macLen) {
		return Claims{}, ErrNotSigned
	}
	var buf [maxPassword]byte
	n, err := strict.Decode(buf[:], []byte(password))
	if err != nil || base64.RawURLEncoding.EncodedLen(n) != len(password) || buf[0] != version {
		return Claims{}, ErrNotSigned
	}
	raw := buf[:n]
	payload, mac := raw[:n-macLen], raw[n-macLen:]
	var k *Key
	for i := range keys {
		if [keyIDLen]byte(payload[1:1+keyIDLen]) == keys[i].id {
			k = &keys[i]
			break
		}
	}
	if k == nil {
		return Claims{}, ErrNotSigned
	}
	var want [macLen]byte
	if !hmac.Equal(mac, k.credentialMAC(want[:0], username, payload)) {
		return Claims{}, ErrNotSigned
	}
	r := payload[1+keyIDLen:]
	epoch, n1 := binary.Uvarint(r)
	if n1 <= 0 {
		return Claims{}, ErrNotSigned
	}
	serial, n2 := binary.Uvarint(r[n1:])
	if n2 <= 0 {
		return Claims{}, ErrNotSigned
	}
	end, n3 := binary.Varint(r[n1+n2:])
	if n3 <= 0 || n1+n2+n3 != len(r) {
		return Claims{}, ErrNotSigned
	}
	return Claims{Ref: Ref{Epoch: epoch, Serial: serial}, End: time.UnixMilli(end)}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}
