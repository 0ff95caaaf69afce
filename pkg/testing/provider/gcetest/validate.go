package gcetest

// Request validation, list filters, page tokens and the wire format, as the
// real API does them.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	compute "google.golang.org/api/compute/v1"
)

var (
	nameRE        = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	labelKeyRE    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValueRE  = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	metadataKeyRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
)

const (
	maxLabels           = 64
	maxMetadataValue    = 256 << 10
	maxMetadataTotal    = 512 << 10
	maxNetworkTagLength = 63
)

func (s *Server) validate(k vmKey, inst *compute.Instance) *APIError {
	switch {
	case inst.Name == "":
		return &APIError{Code: http.StatusBadRequest, Reason: "required", Message: "Required field 'resource.name' not specified"}
	case !nameRE.MatchString(inst.Name):
		return invalidField("resource.name", inst.Name, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
	case inst.MachineType == "":
		return &APIError{Code: http.StatusBadRequest, Reason: "required", Message: "Required field 'resource.machineType' not specified"}
	}
	if mtZone := zoneOf(inst.MachineType); (mtZone != "" && mtZone != k.zone) || !slices.Contains(s.machineTypes, lastSegment(inst.MachineType)) {
		return invalidField("resource.machineType", inst.MachineType,
			fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", lastSegment(inst.MachineType), k.zone))
	}
	var boot *compute.AttachedDisk
	for _, d := range inst.Disks {
		if d.Boot {
			boot = d
		}
	}
	if boot == nil || boot.InitializeParams == nil || boot.InitializeParams.SourceImage == "" {
		return &APIError{Code: http.StatusBadRequest, Reason: "required", Message: "Required field 'resource.disks[0].initializeParams.sourceImage' not specified"}
	}
	if image := resourcePath(boot.InitializeParams.SourceImage); !slices.Contains(s.images, image) {
		return notFound(image)
	}
	if len(inst.NetworkInterfaces) == 0 {
		return &APIError{Code: http.StatusBadRequest, Reason: "required", Message: "Required field 'resource.networkInterfaces' not specified"}
	}
	for i, nic := range inst.NetworkInterfaces {
		if nic.Network == "" && nic.Subnetwork == "" {
			return &APIError{Code: http.StatusBadRequest, Reason: "required", Message: fmt.Sprintf("Required field 'resource.networkInterfaces[%d].network' not specified", i)}
		}
		for _, ac := range nic.AccessConfigs {
			if ac.Type != "" && ac.Type != "ONE_TO_ONE_NAT" {
				return invalidField(fmt.Sprintf("resource.networkInterfaces[%d].accessConfigs[0].type", i), ac.Type, "")
			}
		}
		if len(nic.Ipv6AccessConfigs) > 0 && nic.StackType != "IPV4_IPV6" {
			return invalidField(fmt.Sprintf("resource.networkInterfaces[%d].ipv6AccessConfigs", i), "", "IPv6 access configs need stackType IPV4_IPV6.")
		}
		for _, ac := range nic.Ipv6AccessConfigs {
			if ac.Type != "DIRECT_IPV6" {
				return invalidField(fmt.Sprintf("resource.networkInterfaces[%d].ipv6AccessConfigs[0].type", i), ac.Type, "")
			}
		}
	}
	if len(inst.Labels) > maxLabels {
		return invalidField("resource.labels", "", fmt.Sprintf("Too many labels: %d, the maximum is %d.", len(inst.Labels), maxLabels))
	}
	for key, value := range inst.Labels {
		if !labelKeyRE.MatchString(key) || !labelValueRE.MatchString(value) {
			return invalidField("resource.labels", "", fmt.Sprintf("Label key '%s' or value '%s' violates format constraints.", key, value))
		}
	}
	if inst.Metadata != nil {
		seen, total := map[string]bool{}, 0
		for i, item := range inst.Metadata.Items {
			field := fmt.Sprintf("resource.metadata.items[%d]", i)
			switch {
			case item == nil || !metadataKeyRE.MatchString(item.Key):
				return invalidField(field+".key", "", "Must be a match of regex '[a-zA-Z0-9-_]{1,128}'")
			case seen[item.Key]:
				return invalidField(field+".key", item.Key, "Duplicate metadata key.")
			case item.Value != nil && len(*item.Value) > maxMetadataValue:
				// The real API does not echo the value; neither does the fake.
				return invalidField(field+".value", "", "Metadata value too large.")
			}
			seen[item.Key] = true
			if item.Value != nil {
				total += len(item.Key) + len(*item.Value)
			}
		}
		if total > maxMetadataTotal {
			return invalidField("resource.metadata", "", "Metadata too large.")
		}
	}
	if inst.Tags != nil {
		for _, tag := range inst.Tags.Items {
			if len(tag) > maxNetworkTagLength || !nameRE.MatchString(tag) {
				return invalidField("resource.tags.items", tag, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
			}
		}
	}
	if sch := inst.Scheduling; sch != nil && sch.ProvisioningModel == "SPOT" {
		switch {
		case sch.AutomaticRestart == nil || *sch.AutomaticRestart:
			return invalidField("resource.scheduling.automaticRestart", "true", "Spot VMs cannot restart automatically.")
		case sch.OnHostMaintenance != "TERMINATE":
			return invalidField("resource.scheduling.onHostMaintenance", sch.OnHostMaintenance, "Spot VMs must terminate on host maintenance.")
		case sch.InstanceTerminationAction != "STOP" && sch.InstanceTerminationAction != "DELETE":
			return invalidField("resource.scheduling.instanceTerminationAction", sch.InstanceTerminationAction, "")
		}
	}
	return nil
}

// ---- filter ----

var (
	filterTermRE  = regexp.MustCompile(`^\s*([a-zA-Z][a-zA-Z0-9_]*(?:\.[a-zA-Z0-9_-]+)?)\s*(=|!=)\s*(?:"([^"]*)"|([^\s()"]+))\s*$`)
	filterParenRE = regexp.MustCompile(`\(([^()]*)\)`)
)

// parseFilter understands what the provider sends and a little more:
// `field = "value"` or `field != value`, several of them parenthesized and
// ANDed, on labels.KEY, name and status. Anything else is the 400 the real
// API gives to a filter it cannot parse.
func parseFilter(filter string) (func(*compute.Instance) bool, *APIError) {
	filter = strings.TrimSpace(filter)
	if filter == "" {
		return func(*compute.Instance) bool { return true }, nil
	}
	terms := []string{filter}
	if strings.HasPrefix(filter, "(") {
		terms = nil
		rest := filterParenRE.ReplaceAllStringFunc(filter, func(m string) string {
			terms = append(terms, m[1:len(m)-1])
			return ""
		})
		if strings.TrimSpace(strings.ReplaceAll(rest, "AND", "")) != "" {
			return nil, invalidField("filter", filter, "Invalid list filter expression.")
		}
	}
	var preds []func(*compute.Instance) bool
	for _, term := range terms {
		m := filterTermRE.FindStringSubmatch(term)
		if m == nil {
			return nil, invalidField("filter", filter, "Invalid list filter expression.")
		}
		field, negate, want := m[1], m[2] == "!=", m[3]+m[4]
		var get func(*compute.Instance) string
		switch {
		case strings.HasPrefix(field, "labels."):
			key := strings.TrimPrefix(field, "labels.")
			get = func(i *compute.Instance) string { return i.Labels[key] }
		case field == "name":
			get = func(i *compute.Instance) string { return i.Name }
		case field == "status":
			get = func(i *compute.Instance) string { return i.Status }
		default:
			return nil, invalidField("filter", filter, "Invalid field name '"+field+"'.")
		}
		preds = append(preds, func(i *compute.Instance) bool { return (get(i) == want) != negate })
	}
	return func(i *compute.Instance) bool {
		for _, p := range preds {
			if !p(i) {
				return false
			}
		}
		return true
	}, nil
}

// ---- encoding ----

func encodePageToken(offset int, project string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(project + ":" + strconv.Itoa(offset)))
}

func decodePageToken(tok, project string) (int, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, err
	}
	p, n, ok := strings.Cut(string(raw), ":")
	if !ok || p != project {
		return 0, fmt.Errorf("token of another list")
	}
	return strconv.Atoi(n)
}

func notFound(resource string) *APIError {
	return &APIError{Code: http.StatusNotFound, Reason: "notFound", Message: fmt.Sprintf("The resource '%s' was not found", resource)}
}

func invalidField(field, value, detail string) *APIError {
	msg := fmt.Sprintf("Invalid value for field '%s': '%s'.", field, value)
	if detail != "" {
		msg += " " + detail
	}
	return &APIError{Code: http.StatusBadRequest, Reason: "invalid", Message: msg}
}

func writeError(w http.ResponseWriter, e *APIError) {
	domain := e.Domain
	if domain == "" {
		domain = "global"
	}
	body := map[string]any{"error": map[string]any{
		"code":    e.Code,
		"message": e.Message,
		"errors":  []map[string]string{{"message": e.Message, "domain": domain, "reason": e.Reason}},
	}}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		writeError(w, &APIError{Code: http.StatusInternalServerError, Reason: "internalError", Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(buf.Bytes())
}

// clone deep-copies an instance through JSON, as a response would.
func clone(inst *compute.Instance) *compute.Instance {
	raw, err := json.Marshal(inst)
	if err != nil {
		panic(fmt.Sprintf("gcetest: marshal instance: %v", err))
	}
	var out compute.Instance
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(fmt.Sprintf("gcetest: unmarshal instance: %v", err))
	}
	return &out
}

// resourcePath turns a resource URL into its "projects/…" path.
func resourcePath(u string) string {
	if i := strings.Index(u, "projects/"); i >= 0 {
		return u[i:]
	}
	return u
}

// zoneOf is the zone named in a zonal resource path, or "".
func zoneOf(path string) string {
	_, rest, ok := strings.Cut(path, "zones/")
	if !ok {
		return ""
	}
	zone, _, _ := strings.Cut(rest, "/")
	return zone
}

func lastSegment(u string) string { return u[strings.LastIndex(u, "/")+1:] }
