package hcloudtest

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// The firewall operations (spec.hetzner.allowFrom's owned firewall).
const (
	CreateFirewall Op = "CreateFirewall"
	ListFirewalls  Op = "ListFirewalls"
	DeleteFirewall Op = "DeleteFirewall"
)

// Firewall is a snapshot of a firewall.
type Firewall struct {
	ID      int64
	Name    string
	Labels  map[string]string
	Rules   []schema.FirewallRuleRequest
	Created time.Time
	// Selectors are the label selectors it is applied by; AppliedTo the
	// servers (not deleting) they select now, by ID.
	Selectors []string
	AppliedTo []int64
}

type firewall struct {
	Firewall
	match []func(map[string]string) bool
}

// Firewalls are the firewalls that exist, by ID.
func (f *Fake) Firewalls() []Firewall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Firewall
	for _, id := range f.firewallIDs() {
		out = append(out, f.firewalls[id].snapshot(f))
	}
	return out
}

func (f *Fake) firewallIDs() []int64 {
	return slices.Sorted(maps.Keys(f.firewalls))
}

// appliedTo are the servers fw applies to: those its selectors select,
// not being deleted.
func (fw *firewall) appliedTo(f *Fake) []int64 {
	var out []int64
	for _, id := range f.sortedIDs() {
		s := f.servers[id]
		if s.Status == "deleting" {
			continue
		}
		for _, m := range fw.match {
			if m(s.Labels) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

func (fw *firewall) snapshot(f *Fake) Firewall {
	out := fw.Firewall
	out.Rules = slices.Clone(fw.Rules)
	out.Selectors = slices.Clone(fw.Selectors)
	out.AppliedTo = fw.appliedTo(f)
	return out
}

func (fw *firewall) schema(f *Fake) schema.Firewall {
	out := schema.Firewall{ID: fw.ID, Name: fw.Name, Labels: fw.Labels, Created: fw.Created, Rules: []schema.FirewallRule{}, AppliedTo: []schema.FirewallResource{}}
	for _, r := range fw.Rules {
		out.Rules = append(out.Rules, schema.FirewallRule{Direction: r.Direction, SourceIPs: r.SourceIPs, DestinationIPs: []string{}, Protocol: r.Protocol, Port: r.Port, Description: r.Description})
	}
	applied := fw.appliedTo(f)
	for _, sel := range fw.Selectors {
		res := schema.FirewallResource{Type: "label_selector", LabelSelector: &schema.FirewallResourceLabelSelector{Selector: sel}}
		for _, id := range applied {
			res.AppliedToResources = append(res.AppliedToResources, schema.FirewallResource{Type: "server", Server: &schema.FirewallResourceServer{ID: id}})
		}
		out.AppliedTo = append(out.AppliedTo, res)
	}
	return out
}

func (f *Fake) createFirewall(r *http.Request) answer {
	var req schema.FirewallCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return invalid("body")
	}
	fw := &firewall{Firewall: Firewall{Name: req.Name, Labels: map[string]string{}, Rules: req.Rules, Created: time.Now().UTC()}}
	if bad := validateFirewall(req, fw); len(bad) > 0 {
		return invalid(bad...)
	}
	for _, other := range f.firewalls {
		if other.Name == req.Name {
			return faultkit.Fail(Error{Status: 409, Code: "uniqueness_error", Message: "firewall name is already used", Fields: []string{"name"}})
		}
	}
	if req.Labels != nil {
		fw.Labels = *req.Labels
	}
	f.nextID++
	fw.ID = 5000 + f.nextID
	f.firewalls[fw.ID] = fw
	return answer{Status: http.StatusCreated, Body: schema.FirewallCreateResponse{Firewall: fw.schema(f), Actions: []schema.Action{}}}
}

// validateFirewall names the invalid fields of a firewall create, as
// Hetzner does, and fills in fw's selectors.
func validateFirewall(req schema.FirewallCreateRequest, fw *firewall) []string {
	var bad []string
	if !validName.MatchString(req.Name) {
		bad = append(bad, "name")
	}
	if req.Labels != nil {
		for k, v := range *req.Labels {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				bad = append(bad, "labels")
				break
			}
		}
	}
	for _, rule := range req.Rules {
		if (rule.Direction != "in" && rule.Direction != "out") || (rule.Protocol == "tcp" && (rule.Port == nil || !validPort(*rule.Port))) || len(rule.SourceIPs) == 0 && rule.Direction == "in" {
			bad = append(bad, "rules")
			break
		}
		for _, ip := range rule.SourceIPs {
			if p, err := netip.ParsePrefix(ip); err != nil || p.Masked() != p {
				bad = append(bad, "rules.source_ips")
				break
			}
		}
	}
	for _, res := range req.ApplyTo {
		if res.Type != "label_selector" || res.LabelSelector == nil {
			bad = append(bad, "apply_to")
			break
		}
		m, err := parseSelector(res.LabelSelector.Selector)
		if err != nil {
			bad = append(bad, "apply_to.label_selector")
			break
		}
		fw.Selectors, fw.match = append(fw.Selectors, res.LabelSelector.Selector), append(fw.match, m)
	}
	return bad
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

func (f *Fake) listFirewalls(r *http.Request) answer {
	q := r.URL.Query()
	match, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		return invalid("label_selector")
	}
	var found []*firewall
	for _, id := range f.firewallIDs() {
		fw := f.firewalls[id]
		if (q.Get("name") == "" || fw.Name == q.Get("name")) && match(fw.Labels) {
			found = append(found, fw)
		}
	}
	shown, meta := paginate(q, found)
	body := struct {
		Firewalls []schema.Firewall `json:"firewalls"`
		Meta      schema.Meta       `json:"meta"`
	}{Firewalls: []schema.Firewall{}, Meta: meta}
	for _, fw := range shown {
		body.Firewalls = append(body.Firewalls, fw.schema(f))
	}
	return answer{Status: http.StatusOK, Body: body}
}

// deleteFirewall refuses a firewall still applied to a server
// (resource_in_use), as Hetzner does.
func (f *Fake) deleteFirewall(r *http.Request) answer {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	fw, ok := f.firewalls[id]
	if !ok {
		return faultkit.Fail(Error{Status: 404, Code: "not_found", Message: "firewall not found"})
	}
	if len(fw.appliedTo(f)) > 0 {
		return faultkit.Fail(Error{Status: 422, Code: "resource_in_use", Message: "firewall is still in use"})
	}
	delete(f.firewalls, id)
	return answer{Status: http.StatusNoContent}
}
