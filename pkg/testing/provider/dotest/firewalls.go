package dotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/digitalocean/godo"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// The firewall and tag operations (spec.digitalocean.allowFrom's owned
// firewall).
const (
	CreateTag      Op = "CreateTag"
	CreateFirewall Op = "CreateFirewall"
	ListFirewalls  Op = "ListFirewalls"
	DeleteFirewall Op = "DeleteFirewall"
)

// Firewall is a snapshot of a cloud firewall; AppliedTo are the droplets
// carrying one of its tags now, by ID.
type Firewall struct {
	godo.Firewall
	AppliedTo []int
}

// Firewalls are the firewalls that exist, in creation order.
func (f *Fake) Firewalls() []Firewall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []Firewall{}
	for _, fw := range f.firewalls {
		out = append(out, Firewall{Firewall: fw, AppliedTo: f.appliedTo(fw)})
	}
	return out
}

func (f *Fake) appliedTo(fw godo.Firewall) []int {
	var ids []int
	for _, id := range f.sortedIDs() {
		if slices.ContainsFunc(fw.Tags, func(t string) bool { return slices.Contains(f.droplets[id].Tags, t) }) {
			ids = append(ids, id)
		}
	}
	return ids
}

func (f *Fake) createTag(_ *http.Request, body []byte) answer {
	var req godo.TagCreateRequest
	if json.Unmarshal(body, &req) != nil || !validTag.MatchString(req.Name) {
		return faultkit.Fail(Error{Status: 422, ID: "unprocessable_entity", Message: "name is invalid"})
	}
	f.tags[req.Name] = true
	return answer{Status: http.StatusCreated, Body: map[string]any{"tag": map[string]any{"name": req.Name}}}
}

// createFirewall validates as DigitalOcean does what the provider sends:
// a name, rules with protocols and ports, sources as CIDRs, and tags that
// exist (DigitalOcean answers 422 for a tag it does not know).
func (f *Fake) createFirewall(_ *http.Request, body []byte) answer {
	var req godo.FirewallRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return faultkit.Fail(Error{Status: 400, ID: "bad_request", Message: err.Error()})
	}
	if msg := f.validateFirewall(req); msg != "" {
		return faultkit.Fail(Error{Status: 422, ID: "unprocessable_entity", Message: msg})
	}
	f.nextFirewall++
	fw := godo.Firewall{
		ID: fmt.Sprintf("fb6045f1-cf1d-4ca3-bfac-18832663%04x", f.nextFirewall), Name: req.Name, Status: "succeeded",
		InboundRules: req.InboundRules, OutboundRules: req.OutboundRules, Tags: req.Tags, DropletIDs: []int{},
		Created: time.Now().UTC().Format(time.RFC3339),
	}
	f.firewalls = append(f.firewalls, fw)
	return answer{Status: http.StatusAccepted, Body: map[string]any{"firewall": fw}}
}

func (f *Fake) validateFirewall(req godo.FirewallRequest) string {
	if req.Name == "" || len(req.Name) > 255 {
		return "name is invalid"
	}
	for _, r := range req.InboundRules {
		if r.Protocol != "tcp" && r.Protocol != "udp" && r.Protocol != "icmp" || r.Sources == nil {
			return "inbound rule is invalid"
		}
		if r.Protocol != "icmp" && !validPorts(r.PortRange) {
			return "inbound rule ports are invalid"
		}
		for _, a := range r.Sources.Addresses {
			if _, err := netip.ParsePrefix(a); err != nil {
				return "inbound rule source " + a + " is invalid"
			}
		}
	}
	for _, t := range req.Tags {
		if !f.tags[t] {
			return "tag " + t + " not found"
		}
	}
	return ""
}

func validPorts(s string) bool {
	n, err := strconv.Atoi(s)
	return s == "all" || s == "0" || (err == nil && n >= 1 && n <= 65535)
}

func (f *Fake) listFirewalls(r *http.Request, _ []byte) answer {
	shown, links := paginate(r, f.firewalls)
	// A copy: the answer is written after the lock is released.
	return answer{Status: http.StatusOK, Body: map[string]any{"firewalls": slices.Clone(shown), "links": links, "meta": map[string]int{"total": len(f.firewalls)}}}
}

func (f *Fake) deleteFirewall(r *http.Request, _ []byte) answer {
	id := r.PathValue("id")
	i := slices.IndexFunc(f.firewalls, func(fw godo.Firewall) bool { return fw.ID == id })
	if i < 0 {
		return faultkit.Fail(Error{Status: 404, ID: "not_found", Message: "The resource you were accessing could not be found."})
	}
	f.firewalls = slices.Delete(f.firewalls, i, i+1)
	return answer{Status: http.StatusNoContent}
}
