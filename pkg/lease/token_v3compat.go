package lease

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
)

// Version 3 lease IDs, checked and never minted.
//
// The previous release signed lease IDs with AES-CMAC (version 3, decision
// 159); this one mints version 2 again, HMAC-SHA256 from crypto/hmac
// (docs/decisions/0171-lease-path-plain-again.md). A rolling upgrade must
// not void the leases an old replica granted, so their IDs are still
// verified here until they expire.
//
// Remove this file (and the tokenVersionCMAC case of signer.verify) one
// maximum lease TTL (--lease-max-ttl) after every replica runs a version
// that mints version 2: no version 3 ID can be live after that.

const (
	tokenVersionCMAC = 3
	// cmacKeyLabel derived the AES key of version 3 MACs from the shared
	// key: HMAC-SHA256(key, label), its first 16 bytes.
	cmacKeyLabel = "crawl.proxyfleet.io lease ID MAC, version 3"
)

// cmacV3 checks the MAC of a version 3 ID.
type cmacV3 struct {
	mac *cmac
}

func newCMACV3(key []byte) *cmacV3 {
	derive := hmac.New(sha256.New, key)
	derive.Write([]byte(cmacKeyLabel))
	mac, err := newCMAC(derive.Sum(nil)[:16])
	if err != nil {
		panic(err) // 16 bytes are always an AES key
	}
	return &cmacV3{mac: mac}
}

// verify checks mac against payload, in constant time.
func (v *cmacV3) verify(payload, mac []byte) bool {
	want := v.mac.sum(payload)
	return subtle.ConstantTimeCompare(mac, want[:]) == 1
}

// cmac is AES-CMAC (NIST SP 800-38B, RFC 4493) on the standard library's
// AES; token_v3compat_test.go holds it to RFC 4493's test vectors. It is
// safe for concurrent use.
type cmac struct {
	block cipher.Block
	// k1 and k2 are the subkeys, as two big-endian halves: k1 masks a
	// complete last block, k2 a padded one.
	k1, k2 [2]uint64
}

// newCMAC keys a CMAC with a 16-, 24- or 32-byte AES key.
func newCMAC(key []byte) (*cmac, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	var l [aes.BlockSize]byte
	block.Encrypt(l[:], l[:])
	c := &cmac{block: block}
	c.k1 = double(binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:]))
	c.k2 = double(c.k1[0], c.k1[1])
	return c, nil
}

// double multiplies a 128-bit block by x in GF(2^128), reduced by
// x^128 + x^7 + x^2 + x + 1, without a branch on the key-derived bit.
func double(hi, lo uint64) [2]uint64 {
	reduce := -(hi >> 63) & 0x87
	return [2]uint64{hi<<1 | lo>>63, lo<<1 ^ reduce}
}

// sum is the 16-byte MAC of msg.
func (c *cmac) sum(msg []byte) [aes.BlockSize]byte {
	var x [aes.BlockSize]byte // the chaining value
	// Every block but the last is chained plainly.
	for len(msg) > aes.BlockSize {
		subtle.XORBytes(x[:], x[:], msg[:aes.BlockSize])
		c.block.Encrypt(x[:], x[:])
		msg = msg[aes.BlockSize:]
	}
	// The last block is masked with k1 if complete, else padded with a one
	// bit and zeros and masked with k2 (the empty message is one padded block).
	var last [aes.BlockSize]byte
	copy(last[:], msg)
	k := c.k1
	if len(msg) < aes.BlockSize {
		last[len(msg)] = 0x80
		k = c.k2
	}
	var mask [aes.BlockSize]byte
	binary.BigEndian.PutUint64(mask[:8], k[0])
	binary.BigEndian.PutUint64(mask[8:], k[1])
	subtle.XORBytes(x[:], x[:], last[:])
	subtle.XORBytes(x[:], x[:], mask[:])
	c.block.Encrypt(x[:], x[:])
	return x
}
