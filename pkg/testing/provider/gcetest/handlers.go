package gcetest

// The API methods the fake serves, and how its VMs and operations move on.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"
)

func (s *Server) insert(w http.ResponseWriter, r *http.Request) {
	k := vmKey{project: r.PathValue("project"), zone: r.PathValue("zone")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begin(w, r, MethodInsert) || !s.checkZone(w, k.project, k.zone) {
		return
	}
	var inst compute.Instance
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(body, &inst)
	}
	if err != nil {
		writeError(w, &APIError{Code: http.StatusBadRequest, Reason: "parseError", Message: "Parse Error"})
		return
	}
	if apiErr := s.validate(k, &inst); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	k.name = inst.Name
	if _, exists := s.vms[k]; exists {
		writeError(w, &APIError{Code: http.StatusConflict, Reason: "alreadyExists", Message: fmt.Sprintf("The resource '%s' already exists", k.path())})
		return
	}
	op := s.newOperation(k, "insert")
	if len(s.asyncFails) > 0 {
		op.failure, op.httpCode = s.asyncFails[0], s.asyncCodes[0]
		s.asyncFails, s.asyncCodes = s.asyncFails[1:], s.asyncCodes[1:]
		writeJSON(w, op.op)
		return
	}
	inst.Status = "PROVISIONING"
	s.fillServerFields(k, &inst)
	s.vms[k] = &vm{inst: &inst}
	writeJSON(w, op.op)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	k := vmKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("name")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begin(w, r, MethodGet) || !s.checkZone(w, k.project, k.zone) {
		return
	}
	v, ok := s.vms[k]
	if !ok {
		writeError(w, notFound(k.path()))
		return
	}
	shown := s.observe(k, v)
	if shown == nil {
		writeError(w, notFound(k.path()))
		return
	}
	writeJSON(w, shown)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	k := vmKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("name")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begin(w, r, MethodDelete) || !s.checkZone(w, k.project, k.zone) {
		return
	}
	v, ok := s.vms[k]
	if !ok {
		writeError(w, notFound(k.path()))
		return
	}
	if v.deleting {
		writeError(w, &APIError{Code: http.StatusBadRequest, Reason: "resourceNotReady", Message: fmt.Sprintf("The resource '%s' is not ready", k.path())})
		return
	}
	op := s.newOperation(k, "delete")
	v.deleting, v.seen = true, 0
	v.inst.Status = "STOPPING"
	if s.steps == 0 {
		delete(s.vms, k)
	}
	writeJSON(w, op.op)
}

func (s *Server) aggregatedList(w http.ResponseWriter, r *http.Request) {
	project := r.PathValue("project")
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begin(w, r, MethodAggregatedList) {
		return
	}
	zones, ok := s.zones[project]
	if !ok {
		writeError(w, notFound("projects/"+project))
		return
	}
	q := r.URL.Query()
	match, apiErr := parseFilter(q.Get("filter"))
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	pageSize := 500
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 500 {
			writeError(w, invalidField("maxResults", v, "Must be between 0 and 500"))
			return
		}
		if n > 0 {
			pageSize = n
		}
	}
	offset := 0
	if tok := q.Get("pageToken"); tok != "" {
		n, err := decodePageToken(tok, project)
		if err != nil {
			writeError(w, invalidField("pageToken", tok, "Invalid page token"))
			return
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
	writeJSON(w, list)
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	k := opKey{r.PathValue("project"), r.PathValue("zone"), r.PathValue("operation")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begin(w, r, MethodOperationGet) || !s.checkZone(w, k.project, k.zone) {
		return
	}
	op, ok := s.operations[k]
	if !ok {
		writeError(w, notFound("projects/"+k.project+"/zones/"+k.zone+"/operations/"+k.name))
		return
	}
	s.progress(op)
	writeJSON(w, op.op)
}

// ---- lifecycle ----

// begin records the call and answers a programmed fault; false when it did.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, m Method) bool {
	path := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/compute/v1"), "/")
	s.calls = append(s.calls, Call{Method: m, Path: path, Query: r.URL.Query()})
	if queued := s.faults[m]; len(queued) > 0 {
		s.faults[m] = queued[1:]
		writeError(w, queued[0])
		return false
	}
	if err := s.sticky[m]; err != nil {
		writeError(w, err)
		return false
	}
	return true
}

func (s *Server) checkZone(w http.ResponseWriter, project, zone string) bool {
	zones, ok := s.zones[project]
	if !ok {
		writeError(w, notFound("projects/"+project))
		return false
	}
	if !slices.Contains(zones, zone) {
		writeError(w, notFound("projects/"+project+"/zones/"+zone))
		return false
	}
	return true
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

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

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
