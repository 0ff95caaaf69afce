package azuretest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v8"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// kind is a resource type and its operations.
type kind struct {
	name, ns                string
	put, get, list, delete_ Op
}

var (
	kindVM  = &kind{"virtualMachines", "Microsoft.Compute", PutVM, GetVM, ListVMs, DeleteVM}
	kindNIC = &kind{"networkInterfaces", "Microsoft.Network", PutNIC, GetNIC, "", DeleteNIC}
	kindIP  = &kind{"publicIPAddresses", "Microsoft.Network", PutIP, GetIP, ListIPs, DeleteIP}
	kindNSG = &kind{"networkSecurityGroups", "Microsoft.Network", PutNSG, GetNSG, ListNSGs, DeleteNSG}
	kinds   = []*kind{kindVM, kindNIC, kindIP, kindNSG}
)

// resource is one resource the fake keeps.
type resource struct {
	faultkit.Lag // reads that do not show it yet (WithGetLag)
	kind         *kind
	name         string
	location     string
	tags         map[string]string
	props        map[string]any // as the last PUT sent them
	state        string         // provisioningState
	created      time.Time
	address      string // a public IP's
	userData     string // a VM's custom data, decoded
	size         string
	image        string
	refs         []string // the IDs it references (subnet, public IP, NSG, NIC)
	pending      *operation
}

// operation is a long-running operation: done after opts.steps reads.
type operation struct {
	reads  int
	failed *Error
	finish func() // the effect when it succeeds
	status string
}

func (f *Fake) id(k *kind, name string) string {
	return "/subscriptions/" + SubscriptionID + "/resourceGroups/" + ResourceGroup + "/providers/" + k.ns + "/" + k.name + "/" + name
}

func (f *Fake) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", f.openIDConfiguration)
	mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", f.token)
	mux.HandleFunc("GET /subscriptions/{sub}/providers/{ns}/locations/{loc}/operations/{op}", f.handle(GetOperation, nil, f.getOperation))
	for _, k := range kinds {
		base := "/subscriptions/{sub}/resourceGroups/{rg}/providers/" + k.ns + "/" + k.name
		mux.HandleFunc("PUT "+base+"/{name}", f.handle(k.put, k, f.put))
		mux.HandleFunc("GET "+base+"/{name}", f.handle(k.get, k, f.get))
		mux.HandleFunc("DELETE "+base+"/{name}", f.handle(k.delete_, k, f.delete))
		if k.list != "" {
			mux.HandleFunc("GET "+base, f.handle(k.list, k, f.list))
		}
	}
	return mux
}

// answer is what an operation does: a status, headers and a body, or an Error.
type answer = faultkit.Answer[Error]

// actionsOf are the role actions a call needs: its own, and the join
// action of each resource a PUT references.
func actionsOf(r *http.Request, k *kind, refs []string) []string {
	if k == nil {
		return []string{r.PathValue("ns") + "/locations/operations/read"}
	}
	verb := map[string]string{http.MethodPut: "write", http.MethodGet: "read", http.MethodDelete: "delete"}[r.Method]
	actions := []string{k.ns + "/" + k.name + "/" + verb}
	for _, ref := range refs {
		for _, j := range []struct{ part, action string }{
			{"/subnets/", "Microsoft.Network/virtualNetworks/subnets/join/action"},
			{"/publicIPAddresses/", "Microsoft.Network/publicIPAddresses/join/action"},
			{"/networkSecurityGroups/", "Microsoft.Network/networkSecurityGroups/join/action"},
			{"/networkInterfaces/", "Microsoft.Network/networkInterfaces/join/action"},
		} {
			if strings.Contains(ref, j.part) {
				actions = append(actions, j.action)
			}
		}
	}
	return actions
}

// handle serves one call of op through the kit (the token, the group it
// acts in, the role's actions it needs, the faults), do running under the
// lock.
func (f *Fake) handle(op Op, k *kind, do func(r *http.Request, k *kind, body []byte) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeError(w, Error{Status: 400, Code: "InvalidRequestContent", Message: err.Error()}, 0)
			return
		}
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		group := r.PathValue("rg")
		if k == nil {
			group = ResourceGroup // a poll reads the operation of a resource in the group
		}
		c := &faultkit.Call[Op]{
			Op: op, Token: token, Needs: actionsOf(r, k, referencesOf(k, body)),
			Scope: "/subscriptions/" + r.PathValue("sub") + "/resourceGroups/" + group,
		}
		f.Serve(w, r, c, func(*faultkit.Call[Op]) answer {
			f.mu.Lock()
			defer f.mu.Unlock()
			return do(r, k, body)
		})
	}
}

// denied is Resource Manager's answer to a bad token, to a call outside the
// role's resource group (the fake's subscription has no other group), or
// to one the role has no action for.
func denied(c *faultkit.Call[Op], d faultkit.Denial) Error {
	switch d.Reason {
	case faultkit.Unauthenticated:
		return Error{Status: 401, Code: "InvalidAuthenticationToken", Message: "The access token is invalid."}
	case faultkit.OutOfScope:
		return Error{Status: 404, Code: "ResourceGroupNotFound", Message: "Resource group '" + path.Base(c.Scope) + "' could not be found."}
	}
	return Error{Status: 403, Code: "AuthorizationFailed", Message: fmt.Sprintf(
		"The client '%s' does not have authorization to perform action '%s' over scope '%s'.", ClientID, d.Permission, c.Scope)}
}

// randomFaults are Resource Manager's under load: its 5xx, a 429 and lost
// answers (twice: the share they had when the storm was tuned), and
// SkuNotAvailable on VM PUTs.
func randomFaults(op Op) []faultkit.Fault[Error] {
	faults := []faultkit.Fault[Error]{faultkit.Error(ErrServerError), faultkit.Error(ErrUnavailable), faultkit.Error(ErrRateLimited), {Lose: true}, {Lose: true}}
	if op == PutVM {
		faults = append(faults, faultkit.Error(Error{Status: 409, Code: "SkuNotAvailable", Message: "The requested VM size is currently not available in this location."}))
	}
	return faults
}

// write sends a as Resource Manager does.
func write(w http.ResponseWriter, _ *faultkit.Call[Op], a answer) {
	if a.Err != nil {
		writeError(w, *a.Err, a.RetryAfter)
		return
	}
	maps.Copy(w.Header(), a.Header)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	if a.Body != nil {
		_ = json.NewEncoder(w).Encode(a.Body)
	}
}

func writeError(w http.ResponseWriter, e Error, retryAfter time.Duration) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-ms-error-code", e.Code)
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": e.Code, "message": e.Message}})
}

func invalid(code, message string) answer {
	return faultkit.Fail(Error{Status: 400, Code: code, Message: message})
}

// referencesOf are the resource IDs a PUT's body references.
func referencesOf(k *kind, body []byte) []string {
	var refs []string
	add := func(id *string) {
		if id != nil && *id != "" {
			refs = append(refs, *id)
		}
	}
	switch k {
	case kindVM:
		var vm armcompute.VirtualMachine
		if json.Unmarshal(body, &vm) == nil && vm.Properties != nil && vm.Properties.NetworkProfile != nil {
			for _, n := range vm.Properties.NetworkProfile.NetworkInterfaces {
				add(n.ID)
			}
		}
	case kindNIC:
		var nic armnetwork.Interface
		if json.Unmarshal(body, &nic) == nil && nic.Properties != nil {
			for _, c := range nic.Properties.IPConfigurations {
				if c.Properties != nil && c.Properties.Subnet != nil {
					add(c.Properties.Subnet.ID)
				}
				if c.Properties != nil && c.Properties.PublicIPAddress != nil {
					add(c.Properties.PublicIPAddress.ID)
				}
			}
			if nic.Properties.NetworkSecurityGroup != nil {
				add(nic.Properties.NetworkSecurityGroup.ID)
			}
		}
	}
	return refs
}

// byID is the resource with this ID, nil if none (or still hidden).
func (f *Fake) byID(id string) *resource {
	for _, k := range kinds {
		if name, ok := strings.CutPrefix(strings.ToLower(id), strings.ToLower(f.id(k, ""))); ok {
			return f.resources[k.name+"/"+name]
		}
	}
	return nil
}

// usedBy are the resources that reference id.
func (f *Fake) usedBy(id string) []*resource {
	var out []*resource
	for _, r := range f.resources {
		if slices.ContainsFunc(r.refs, func(ref string) bool { return strings.EqualFold(ref, id) }) {
			out = append(out, r)
		}
	}
	return out
}

func (f *Fake) put(r *http.Request, k *kind, body []byte) answer {
	var doc struct {
		Location   string            `json:"location"`
		Tags       map[string]string `json:"tags"`
		Properties map[string]any    `json:"properties"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return invalid("InvalidRequestContent", err.Error())
	}
	name := strings.ToLower(r.PathValue("name"))
	if !slices.Contains(Locations, doc.Location) {
		return invalid("LocationNotAvailableForResourceType", fmt.Sprintf("The provided location '%s' is not available for resource type '%s/%s'.", doc.Location, k.ns, k.name))
	}
	refs := referencesOf(k, body)
	for _, ref := range refs {
		if ref != SubnetID && f.byID(ref) == nil {
			return invalid("InvalidResourceReference", fmt.Sprintf("Resource %s referenced by resource %s was not found.", ref, f.id(k, name)))
		}
		if strings.Contains(ref, "/subnets/") && ref != SubnetID {
			return invalid("InvalidResourceReference", "Resource "+ref+" (subnet) was not found.")
		}
		for _, user := range f.usedBy(ref) {
			if user.name != name && user.kind == k && k != kindNSG && !strings.Contains(ref, "/networkSecurityGroups/") && !strings.Contains(ref, "/subnets/") {
				return invalid("InUse", fmt.Sprintf("Resource %s is already in use by %s.", ref, f.id(user.kind, user.name)))
			}
		}
	}
	res := &resource{kind: k, name: name, location: doc.Location, tags: doc.Tags, props: doc.Properties, refs: refs, created: time.Now().UTC()}
	if k == kindVM {
		if a, ok := f.checkVM(res, body); !ok {
			return a
		}
	}
	old := f.resources[k.name+"/"+name]
	if old != nil && old.state != "Failed" {
		// Resource Manager refuses to change a live VM's OS profile (its
		// admin user, SSH keys, custom data): a retried create must send
		// the same one.
		if k == kindVM && !reflect.DeepEqual(old.props["osProfile"], res.props["osProfile"]) {
			return faultkit.Fail(Error{Status: 409, Code: "PropertyChangeNotAllowed", Message: "Changing property 'osProfile' is not allowed."})
		}
		old.tags, old.props, old.refs = res.tags, res.props, res.refs
		return answer{Status: http.StatusOK, Body: f.render(old)}
	}
	if old != nil {
		res.created = old.created
	}
	f.nextID++
	res.state = "Creating"
	if k == kindIP {
		res.address = fmt.Sprintf("127.0.108.%d", f.nextID%250+1)
	}
	if k == kindVM {
		res.Hide(f.opts.getLag)
		f.created = append(f.created, f.vmSnapshot(res))
	}
	f.resources[k.name+"/"+name] = res
	op := &operation{finish: func() { f.succeeded(res) }}
	if code, none := f.NoCapacity(res.size); k == kindVM && none {
		op.failed = &Error{Status: 200, Code: code, Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."}
	}
	return f.longRunning(r, http.StatusCreated, res, op)
}

// checkVM validates a VM's size, image and custom data, and answers a
// size without capacity at once (SkuNotAvailable).
func (f *Fake) checkVM(res *resource, body []byte) (answer, bool) {
	var vm armcompute.VirtualMachine
	_ = json.Unmarshal(body, &vm)
	p := vm.Properties
	if p == nil || p.HardwareProfile == nil || p.HardwareProfile.VMSize == nil || p.StorageProfile == nil || p.StorageProfile.ImageReference == nil || p.OSProfile == nil {
		return invalid("InvalidParameter", "Required parameters hardwareProfile.vmSize, storageProfile.imageReference and osProfile are missing."), false
	}
	res.size = string(*p.HardwareProfile.VMSize)
	img := p.StorageProfile.ImageReference
	res.image = deref(img.Publisher) + "/" + deref(img.Offer) + "/" + deref(img.SKU)
	data, err := base64.StdEncoding.DecodeString(deref(p.OSProfile.CustomData))
	noCapacity, _ := f.NoCapacity(res.size)
	switch {
	case !slices.Contains(Sizes, res.size):
		return invalid("InvalidParameter", "The value "+res.size+" provided for the VM size (vmSize) is not valid."), false
	case !slices.Contains(Images, res.image):
		return faultkit.Fail(Error{Status: 404, Code: "PlatformImageNotFound", Message: "The platform image '" + res.image + "' is not available."}), false
	case err != nil || len(deref(p.OSProfile.CustomData)) > 64*1024:
		return invalid("InvalidParameter", "The value of parameter customData is invalid."), false
	case noCapacity == "SkuNotAvailable":
		return faultkit.Fail(Error{Status: 409, Code: "SkuNotAvailable", Message: "The requested VM size " + res.size + " is currently not available in location."}), false
	}
	res.userData = string(data)
	return answer{}, true
}

// longRunning answers a PUT or DELETE whose operation finishes after
// opts.steps polls (at once when none), with its Azure-AsyncOperation.
func (f *Fake) longRunning(r *http.Request, status int, res *resource, op *operation) answer {
	f.nextID++
	opID := fmt.Sprintf("op-%d", f.nextID)
	f.operations[opID] = op
	res.pending = op
	if f.opts.steps == 0 {
		f.advance(op)
	}
	url := fmt.Sprintf("%s/subscriptions/%s/providers/%s/locations/%s/operations/%s?api-version=%s",
		f.URL, SubscriptionID, res.kind.ns, res.location, opID, r.URL.Query().Get("api-version"))
	h := http.Header{"Azure-Asyncoperation": {url}, "Retry-After-Ms": {"20"}}
	if status == http.StatusAccepted {
		return answer{Status: status, Header: h}
	}
	return answer{Status: status, Header: h, Body: f.render(res)}
}

// advance counts a read of op and finishes it after opts.steps.
func (f *Fake) advance(op *operation) {
	if op.status != "" {
		return
	}
	if op.reads++; op.reads <= f.opts.steps {
		return
	}
	op.status = "Succeeded"
	if op.failed != nil {
		op.status = "Failed"
	}
	op.finish()
}

func (f *Fake) succeeded(res *resource) {
	if res.pending != nil && res.pending.failed != nil {
		res.state = "Failed"
		return
	}
	res.state = "Succeeded"
	if res.kind == kindVM {
		vm := f.vmSnapshot(res)
		f.Boot(res.name, faultkit.Boot{Name: vm.Name, UserData: vm.UserData, PublicIP: vm.PublicIP})
	}
}

func (f *Fake) getOperation(r *http.Request, _ *kind, _ []byte) answer {
	op := f.operations[r.PathValue("op")]
	if op == nil {
		return faultkit.Fail(Error{Status: 404, Code: "NotFound", Message: "The operation was not found."})
	}
	f.advance(op)
	body := map[string]any{"status": cmp(op.status, "InProgress")}
	if op.status == "Failed" {
		body["error"] = map[string]string{"code": op.failed.Code, "message": op.failed.Message}
	}
	return answer{Status: http.StatusOK, Header: http.Header{"Retry-After-Ms": {"20"}}, Body: body}
}

func (f *Fake) get(r *http.Request, k *kind, _ []byte) answer {
	res := f.resources[k.name+"/"+strings.ToLower(r.PathValue("name"))]
	if res != nil && !res.Shown() {
		res = nil
	}
	if res == nil {
		return faultkit.Fail(Error{Status: 404, Code: "ResourceNotFound", Message: fmt.Sprintf("The Resource '%s/%s/%s' under resource group '%s' was not found.", k.ns, k.name, r.PathValue("name"), ResourceGroup)})
	}
	if res.pending != nil {
		f.advance(res.pending)
	}
	return answer{Status: http.StatusOK, Body: f.render(res)}
}

func (f *Fake) list(_ *http.Request, k *kind, _ []byte) answer {
	value := []any{}
	for _, key := range slices.Sorted(maps.Keys(f.resources)) {
		res := f.resources[key]
		if res.kind != k {
			continue
		}
		if !res.Shown() {
			continue
		}
		value = append(value, f.render(res))
	}
	return answer{Status: http.StatusOK, Body: map[string]any{"value": value}}
}

func (f *Fake) delete(r *http.Request, k *kind, _ []byte) answer {
	res := f.resources[k.name+"/"+strings.ToLower(r.PathValue("name"))]
	if res == nil {
		return answer{Status: http.StatusNoContent}
	}
	if users := f.usedBy(f.id(k, res.name)); len(users) > 0 {
		code := map[*kind]string{kindNIC: "NicInUse", kindIP: "PublicIPAddressCannotBeDeleted", kindNSG: "InUseNetworkSecurityGroupCannotBeDeleted"}[k]
		return invalid(code, fmt.Sprintf("%s %s is in use by %s and cannot be deleted.", k.name, res.name, f.id(users[0].kind, users[0].name)))
	}
	if k == kindVM {
		f.Halt(res.name)
	}
	delete(f.resources, k.name+"/"+res.name)
	return f.longRunning(r, http.StatusAccepted, res, &operation{finish: func() {}})
}

// render is a resource as ARM answers it: the properties sent, without
// the custom data, with what ARM adds.
func (f *Fake) render(res *resource) map[string]any {
	props := maps.Clone(res.props)
	if props == nil {
		props = map[string]any{}
	}
	props["provisioningState"] = res.state
	switch res.kind {
	case kindVM:
		if os, ok := props["osProfile"].(map[string]any); ok {
			os = maps.Clone(os)
			delete(os, "customData")
			props["osProfile"] = os
		}
		props["timeCreated"] = res.created.Format(time.RFC3339)
	case kindIP:
		props["ipAddress"] = res.address
	case kindNSG:
		var nics []map[string]string
		for _, user := range f.usedBy(f.id(kindNSG, res.name)) {
			nics = append(nics, map[string]string{"id": f.id(user.kind, user.name)})
		}
		props["networkInterfaces"] = nics
	}
	return map[string]any{"id": f.id(res.kind, res.name), "name": res.name, "type": res.kind.ns + "/" + res.kind.name,
		"location": res.location, "tags": res.tags, "properties": props}
}

// vmSnapshot is res, a VM, with the address of its NIC's public IP.
func (f *Fake) vmSnapshot(res *resource) VM {
	vm := VM{Name: res.name, Size: res.size, Location: res.location, Image: res.image, State: res.state,
		Tags: maps.Clone(res.tags), UserData: res.userData, Created: res.created}
	for _, ref := range res.refs {
		if nic := f.byID(ref); nic != nil {
			vm.NIC = nic.name
			for _, nref := range nic.refs {
				if ip := f.byID(nref); ip != nil && ip.kind == kindIP {
					vm.PublicIP = ip.address
				}
			}
		}
	}
	return vm
}

func (f *Fake) openIDConfiguration(w http.ResponseWriter, r *http.Request) {
	base := "https://" + r.Host + "/" + r.PathValue("tenant")
	writeJSON(w, map[string]any{
		"token_endpoint": base + "/oauth2/v2.0/token", "authorization_endpoint": base + "/oauth2/v2.0/authorize",
		"issuer": base + "/v2.0",
	})
}

// token answers the client-credentials grant of the fake's identity.
func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("tenant") != TenantID || r.PostFormValue("client_id") != ClientID || r.PostFormValue("client_secret") != ClientSecret {
		w.WriteHeader(http.StatusUnauthorized)
		writeJSON(w, map[string]string{"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."})
		return
	}
	writeJSON(w, map[string]any{"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
