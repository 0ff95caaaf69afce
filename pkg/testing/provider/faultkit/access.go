package faultkit

import (
	"maps"
	"slices"
	"strings"
)

// Credential is what one token may do: the permissions it grants (a
// token's scopes, a role's actions) and the scopes it is limited to (a
// project, a resource group, a tag).
type Credential struct {
	// Permissions granted; nil grants every one.
	Permissions []string
	// Scopes the credential is limited to; nil is the whole account. A
	// call is within one when its Scope is it or lies below it ("/" is the
	// separator; case is ignored, as resource IDs compare).
	Scopes []string
}

// Denial says why a call was refused.
type Denial struct {
	Reason DenialReason
	// Permission is the one missing (NotPermitted).
	Permission string
}

// DenialReason is why a credential does not allow a call.
type DenialReason int

// The reasons.
const (
	// Unauthenticated: the call presents no token the fake knows.
	Unauthenticated DenialReason = iota + 1
	// OutOfScope: the call acts outside the credential's scopes.
	OutOfScope
	// NotPermitted: the credential lacks a permission the call needs.
	NotPermitted
)

// access holds the grants (under Kit.mu) and the permissions calls used.
type access struct {
	grants map[string]Credential
	used   map[string]bool
}

// Grant lets calls presenting token do what cred allows. Once a fake made
// a grant, a call presenting any other token is refused.
func (k *Kit[Op, E]) Grant(token string, cred Credential) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.access.grants[token] = cred
}

// UsedPermissions are the permissions the allowed calls so far needed,
// sorted: what a documented role must hold.
func (k *Kit[Op, E]) UsedPermissions() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(maps.Keys(k.access.used))
}

// deny is the denial of c, if any (under k.mu), and records the
// permissions an allowed call used.
func (k *Kit[Op, E]) deny(c *Call[Op]) (Denial, bool) {
	a := &k.access
	if len(a.grants) == 0 {
		return Denial{}, false
	}
	cred, ok := a.grants[c.Token]
	if !ok {
		return Denial{Reason: Unauthenticated}, true
	}
	if cred.Scopes != nil && !slices.ContainsFunc(cred.Scopes, func(s string) bool { return within(c.Scope, s) }) {
		return Denial{Reason: OutOfScope}, true
	}
	for _, p := range c.Needs {
		if cred.Permissions != nil && !slices.Contains(cred.Permissions, p) {
			return Denial{Reason: NotPermitted, Permission: p}, true
		}
	}
	for _, p := range c.Needs {
		a.used[p] = true
	}
	return Denial{}, false
}

// within reports whether scope is outer or lies below it.
func within(scope, outer string) bool {
	scope, outer = strings.ToLower(scope), strings.ToLower(strings.TrimSuffix(outer, "/"))
	return scope == outer || strings.HasPrefix(scope, outer+"/")
}
