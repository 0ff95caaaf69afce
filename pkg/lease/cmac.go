package lease

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
)

// cmac is AES-CMAC (NIST SP 800-38B, RFC 4493): a deterministic MAC for
// messages of any length, built on the standard library's AES. It signs
// lease IDs since format version 3 (docs/architecture.md, decision 159):
// on a machine with AES instructions a 90-byte ID costs six block
// encryptions, against HMAC-SHA256's three SHA-256 blocks, and it keeps
// HMAC's property that matters here, no nonce to manage. cmac_test.go
// holds it to RFC 4493's test vectors. It is safe for concurrent use.
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

// sum writes the 16-byte MAC of msg into out, which it also uses to chain
// the blocks: the cipher.Block interface moves any buffer it is given to
// the heap, so callers pass one that already lives there (signerScratch)
// and a MAC allocates nothing.
func (c *cmac) sum(out *[aes.BlockSize]byte, msg []byte) {
	var x0, x1 uint64 // the chaining value, as two big-endian halves
	// Every block but the last is chained plainly.
	for len(msg) > aes.BlockSize {
		x0, x1 = c.encrypt(out, x0^binary.BigEndian.Uint64(msg[:8]), x1^binary.BigEndian.Uint64(msg[8:16]))
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
	c.encrypt(out, x0^binary.BigEndian.Uint64(last[:8])^k[0], x1^binary.BigEndian.Uint64(last[8:])^k[1])
}

// encrypt is one AES block of the chain, through buf, which holds the
// result.
func (c *cmac) encrypt(buf *[aes.BlockSize]byte, x0, x1 uint64) (uint64, uint64) {
	binary.BigEndian.PutUint64(buf[:8], x0)
	binary.BigEndian.PutUint64(buf[8:], x1)
	c.block.Encrypt(buf[:], buf[:])
	return binary.BigEndian.Uint64(buf[:8]), binary.BigEndian.Uint64(buf[8:])
}
