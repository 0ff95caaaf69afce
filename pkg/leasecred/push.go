package leasecred

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The operator's push to an instance: a batch of what it learned of the
// instance's leases (an end before the expiry, a renewal), sent as an
// origin-form POST to PushPath on the instance's address (where the probes
// go), signed with the instance's lease key. Every update is idempotent
// and an end is final, so a replayed or reordered batch changes nothing.

// PushPath is where an instance takes pushes.
const PushPath = "/lease-updates"

// PushScheme is the Authorization scheme of a push: "LeaseKey <key id>.<mac>".
const PushScheme = "LeaseKey"

// MaxPushBytes bounds a push's body; a pusher splits larger batches.
const MaxPushBytes = 1 << 20

// MaxPushUpdates is the most updates one push carries (well under
// MaxPushBytes at ~60 bytes an update).
const MaxPushUpdates = 8192

// Update is what one push says of one lease.
type Update struct {
	Ref Ref
	// Until is the lease's end as the operator knows it now: a renewal's
	// new expiry, or, for an ended lease, the latest end any credential of
	// it names (how long the instance must remember the end).
	Until time.Time
	// Ended: released, revoked or superseded before Until. The instance
	// refuses every credential of the lease and closes its connections.
	Ended bool
}

type pushBody struct {
	Updates []pushUpdate `json:"updates"`
}

type pushUpdate struct {
	Ref   string `json:"ref"`
	Until int64  `json:"until"` // Unix milliseconds
	Ended bool   `json:"ended,omitempty"`
}

// EncodePush is the body of a push of updates and its Authorization header,
// signed with k.
func EncodePush(k Key, updates []Update) (body []byte, authorization string) {
	b := pushBody{Updates: make([]pushUpdate, len(updates))}
	for i, u := range updates {
		b.Updates[i] = pushUpdate{Ref: u.Ref.String(), Until: u.Until.UnixMilli(), Ended: u.Ended}
	}
	body, _ = json.Marshal(b) // strings, numbers and booleans always encode
	mac := k.pushMAC(body)
	return body, PushScheme + " " + k.ID() + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// VerifyPush checks a push's Authorization against keys and decodes its
// body. Errors say what is wrong, never a key.
func VerifyPush(keys []Key, body []byte, authorization string) ([]Update, error) {
	scheme, cred, _ := strings.Cut(authorization, " ")
	kid, macText, ok := strings.Cut(cred, ".")
	if scheme != PushScheme || !ok {
		return nil, fmt.Errorf("want Authorization: %s <key id>.<mac>", PushScheme)
	}
	id, err := hex.DecodeString(kid)
	if err != nil || len(id) != keyIDLen {
		return nil, errors.New("the push names no key id")
	}
	var k *Key
	for i := range keys {
		if [keyIDLen]byte(id) == keys[i].id {
			k = &keys[i]
		}
	}
	if k == nil {
		return nil, fmt.Errorf("the push is signed with key %s, which this instance does not have", kid)
	}
	mac, err := base64.RawURLEncoding.DecodeString(macText)
	if err != nil || !hmac.Equal(mac, k.pushMAC(body)) {
		return nil, errors.New("the push's signature does not match its body")
	}
	var b pushBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("push body: %w", err)
	}
	if len(b.Updates) > MaxPushUpdates {
		return nil, fmt.Errorf("push of %d updates, over %d", len(b.Updates), MaxPushUpdates)
	}
	out := make([]Update, len(b.Updates))
	for i, u := range b.Updates {
		ref, err := ParseRef(u.Ref)
		if err != nil {
			return nil, fmt.Errorf("push update %d: %w", i, err)
		}
		out[i] = Update{Ref: ref, Until: time.UnixMilli(u.Until), Ended: u.Ended}
	}
	return out, nil
}

// pushMAC is the MAC of a push's body.
func (k Key) pushMAC(body []byte) []byte {
	return k.mac(nil, append([]byte(pushContext), body...))
}
