package gcetest

// The API methods the fake serves, and how its VMs and operations move on.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// answer is what a method does: a JSON body, or an APIError.
type answer = faultkit.Answer[*APIError]

// route serves the calls of m through the kit (its faults), h running
// under the lock; every request is recorded (Requests), faulted or not.
func (s *Server) route(m Method, h func(r *http.Request) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, Call{Method: m, Path: strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/compute/v1"), "/"), Query: r.URL.Query()})
		s.mu.Unlock()
		s.Serve(w, r, &faultkit.Call[Method]{Op: m}, func(*faultkit.Call[Method]) answer {
			s.mu.Lock()
			defer s.mu.Unlock()
			return h(r)
		})
	}
}

// randomFaults are Compute Engine's under load (SetRandomFaults): rate
// limited or failing before the effect, or taking effect and then
// answering 503 (a lost answer).
func randomFaults(Method) []faultkit.Fault[*APIError] {
	return []faultkit.Fault[*APIError]{faultkit.Error(RateLimitExceeded()), faultkit.Error(BackendError()), {Lose: true}}
}

func fail(e *APIError) answer { return faultkit.Fail(e) }

// reply answers v, encoded now: once the lock is released the VM or
// operation it shows moves on.
func reply(v any) answer {
	raw, err := json.Marshal(v)
	if err != nil {
		return fail(&APIError{Code: http.StatusInternalServerError, Reason: "internalError", Message: err.Error()})
	}
	return answer{Status: http.StatusOK, Body: json.RawMessage(raw)}
}

// write sends a as the API does.
func write(w http.ResponseWriter, _ *faultkit.Call[Method], a answer) {
	if a.Err != nil {
		writeError(w, *a.Err)
		return
	}
	writeJSON(w, a.Body)
}

func (s *Server) insert(r *http.Request) answer {
	k := vmKey{project: r.PathValue("project"), zone: r.PathValue("zone")}
	if e := s.zoneError(k.project, k.zone); e != nil {
		return fail(e)
	}
	var inst compute.Instance
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(body, &inst)
	}
	if err != nil {
		return fail(&APIError{Code: http.StatusBadRequest, Reason: "parseError", Message: "Parse Error"})
	}
	if apiErr := s.validate(k, &inst); apiErr != nil {
		return fail(apiErr)
	}
	k.name = inst.Name
	if _, exists := s.vms[k]; exists {
		return fail(&APIError{Code: http.StatusConflict, Reason: "alreadyExists", Message: fmt.Sprintf("The resource '%s' already exists", k.path())})
	}
	op := s.newOperation(k, "insert")
	if len(s.asyncFails) > 0 {
		op.failure, op.httpCode = s.asyncFails[0], s.asyncCodes[0]
		s.asyncFails, s.asyncCodes = s.asyncFails[1:], s.asyncCodes[1:]
		return reply(op.op)
	}
	inst.Status = "PROVISIONING"
	s.fillServerFields(k, &inst)
	s.vms[k] = &vm{inst: &inst}
	return reply(op.op)
}

func (s *Server) get(r *http.Request) answer {
	k := vmKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("name")}
	if e := s.zoneError(k.project, k.zone); e != nil {
		return fail(e)
	}
	v, ok := s.vms[k]
	if !ok {
		return fail(notFound(k.path()))
	}
	shown := s.observe(k, v)
	if shown == nil {
		return fail(notFound(k.path()))
	}
	return reply(shown)
}

func (s *Server) delete(r *http.Request) answer {
	k := vmKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("name")}
	if e := s.zoneError(k.project, k.zone); e != nil {
		return fail(e)
	}
	v, ok := s.vms[k]
	if !ok {
		return fail(notFound(k.path()))
	}
	if v.deleting {
		return fail(&APIError{Code: http.StatusBadRequest, Reason: "resourceNotReady", Message: fmt.Sprintf("The resource '%s' is not ready", k.path())})
	}
	op := s.newOperation(k, "delete")
	v.deleting, v.seen = true, 0
	v.inst.Status = "STOPPING"
	if s.steps == 0 {
		delete(s.vms, k)
	}
	return reply(op.op)
}

func (s *Server) aggregatedList(r *http.Request) answer {
	project := r.PathValue("project")
	zones, ok := s.zones[project]
	if !ok {
		return fail(notFound("projects/" + project))
	}
	q := r.URL.Query()
	match, apiErr := parseFilter(q.Get("filter"))
	if apiErr != nil {
		return fail(apiErr)
	}
	pageSize := 500
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 500 {
			return fail(invalidField("maxResults", v, "Must be between 0 and 500"))
		}
		if n > 0 {
			pageSize = n
		}
	}
	offset := 0
	if tok := q.Get("pageToken"); tok != "" {
		n, err := decodePageToken(tok, project)
		if err != nil {
			return fail(invalidField("pageToken", tok, "Invalid page token"))
		}
		offset = n
	}
	keys := s.sortedKeys(func(k vmKey) bool { return k.project == project && match(s.vms[k].inst) })
	if offset > len(keys) {
		offset = len(keys)
	}
	end := min(offset+pageSize, len(keys))
	list := &compute.InstanceAggregatedList{
		Kind:     "compute#instanceAggregatedList",
		Id:       "projects/" + project + "/aggregated/instances",
		SelfLink: selfLinkBase + "projects/" + project + "/aggregated/instances",
		Items:    map[string]compute.InstancesScopedList{},
	}
	for _, k := range keys[offset:end] {
		scope := "zones/" + k.zone
		scoped := list.Items[scope]
		scoped.Instances = append(scoped.Instances, clone(s.vms[k].inst))
		list.Items[scope] = scoped
	}
	for _, zone := range zones {
		if _, ok := list.Items["zones/"+zone]; !ok {
			list.Items["zones/"+zone] = compute.InstancesScopedList{Warning: &compute.InstancesScopedListWarning{
				Code: "NO_RESULTS_ON_PAGE", Message: "There are no results for scope 'zones/" + zone + "' on this page.",
			}}
		}
	}
	if end < len(keys) {
		list.NextPageToken = encodePageToken(end, project)
	}
	return reply(list)
}

func (s *Server) getOperation(r *http.Request) answer {
	k := opKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("operation")}
	if e := s.zoneError(k.project, k.zone); e != nil {
		return fail(e)
	}
	op, ok := s.operations[k]
	if !ok {
		return fail(notFound("projects/" + k.project + "/zones/" + k.zone + "/operations/" + k.name))
	}
	s.progress(op)
	return reply(op.op)
}

// ---- lifecycle ----

// zoneError is the 404 of a project or zone the fake does not have.
func (s *Server) zoneError(project, zone string) *APIError {
	zones, ok := s.zones[project]
	if !ok {
		return notFound("projects/" + project)
	}
	if !slices.Contains(zones, zone) {
		return notFound("projects/" + project + "/zones/" + zone)
	}
	return nil
}

// observe is one Get of v: it returns what the Get shows (nil once a deleted
// VM is gone) and moves v on after `steps` Gets in a transitional status.
func (s *Server) observe(k vmKey, v *vm) *compute.Instance {
	if s.steps == 0 {
		for s.advance(k, v) {
		}
		if _, ok := s.vms[k]; !ok {
			return nil
		}
		return clone(v.inst)
	}
	shown := clone(v.inst)
	v.seen++
	if v.seen >= s.steps {
		v.seen = 0
		s.advance(k, v)
	}
	return shown
}

// advance moves v to its next status; false when it has none.
func (s *Server) advance(k vmKey, v *vm) bool {
	switch {
	case v.deleting:
		delete(s.vms, k)
		return false
	case v.inst.Status == "PROVISIONING":
		v.inst.Status = "STAGING"
		s.assignAddress(k, v.inst)
		return true
	case v.inst.Status == "STAGING":
		v.inst.Status = "RUNNING"
		return true
	}
	return false
}

// progress updates an operation from the VM it acts on.
func (s *Server) progress(op *operation) {
	if op.op.Status == "DONE" {
		return
	}
	v, exists := s.vms[op.target]
	switch {
	case op.failure != nil:
		op.seen++
		if op.seen < s.steps {
			return
		}
		op.op.Error = op.failure
		op.op.HttpErrorStatusCode = int64(op.httpCode)
		op.op.HttpErrorMessage = http.StatusText(op.httpCode)
	case op.op.OperationType == "insert" && exists && v.inst.Status == "PROVISIONING":
		return
	case op.op.OperationType == "delete" && exists:
		return
	}
	op.op.Status, op.op.Progress = "DONE", 100
	op.op.EndTime = time.Now().UTC().Format(time.RFC3339)
}

func (s *Server) newOperation(k vmKey, kind string) *operation {
	s.serial++
	name := fmt.Sprintf("operation-%d-%s-%s", s.serial, kind, k.name)
	zoneLink := selfLinkBase + "projects/" + k.project + "/zones/" + k.zone
	op := &operation{target: k, op: &compute.Operation{
		Kind:          "compute#operation",
		Id:            s.serial,
		Name:          name,
		OperationType: kind,
		Status:        "RUNNING",
		Progress:      0,
		Zone:          zoneLink,
		TargetLink:    selfLinkBase + k.path(),
		SelfLink:      zoneLink + "/operations/" + name,
		InsertTime:    time.Now().UTC().Format(time.RFC3339),
		StartTime:     time.Now().UTC().Format(time.RFC3339),
	}}
	if s.steps == 0 && kind == "delete" {
		op.op.Status, op.op.Progress = "DONE", 100
	}
	s.operations[opKey{k.project, k.zone, name}] = op
	return op
}

func (s *Server) fillServerFields(k vmKey, inst *compute.Instance) {
	s.serial++
	inst.Kind = "compute#instance"
	inst.Id = s.serial
	inst.Zone = selfLinkBase + "projects/" + k.project + "/zones/" + k.zone
	inst.SelfLink = selfLinkBase + k.path()
	inst.CreationTimestamp = time.Now().UTC().Format(time.RFC3339)
	if inst.MachineType != "" && !strings.HasPrefix(inst.MachineType, "https://") {
		inst.MachineType = selfLinkBase + "projects/" + k.project + "/zones/" + k.zone + "/machineTypes/" + lastSegment(inst.MachineType)
	}
	for i, nic := range inst.NetworkInterfaces {
		nic.Kind = "compute#networkInterface"
		nic.Name = fmt.Sprintf("nic%d", i)
		for _, ac := range nic.AccessConfigs {
			ac.Kind = "compute#accessConfig"
			if ac.NetworkTier == "" {
				ac.NetworkTier = "PREMIUM"
			}
		}
	}
}

func (s *Server) assignAddress(k vmKey, inst *compute.Instance) {
	for _, nic := range inst.NetworkInterfaces {
		for _, ac := range nic.AccessConfigs {
			if ac.Type == "ONE_TO_ONE_NAT" && ac.NatIP == "" {
				ac.NatIP = s.address(k.project, k.zone, k.name)
			}
		}
		// An external /96 per VM, from the documentation range, as
		// Compute Engine gives a DIRECT_IPV6 config of a dual-stack
		// subnetwork.
		for _, ac := range nic.Ipv6AccessConfigs {
			if ac.ExternalIpv6 == "" {
				s.ipv6Ranges++
				ac.ExternalIpv6, ac.ExternalIpv6PrefixLength = fmt.Sprintf("2001:db8:200::%x:0:0", s.ipv6Ranges), 96
			}
		}
	}
}

// loopbackAddress hands out 127.0.100.1, .2, … (wrapping), so that no
// default address is ever outside loopback.
func (s *Server) loopbackAddress(string, string, string) string {
	s.addresses++
	return fmt.Sprintf("127.0.100.%d", (s.addresses-1)%254+1)
}

func (s *Server) sortedKeys(keep func(vmKey) bool) []vmKey {
	var keys []vmKey
	for k := range s.vms {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b vmKey) int {
		return strings.Compare(a.project+"/"+a.zone+"/"+a.name, b.project+"/"+b.zone+"/"+b.name)
	})
	return keys
}
