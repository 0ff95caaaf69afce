package hcloudtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// maxUserData is Hetzner's limit on user-data.
const maxUserData = 32 * 1024

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func (f *Fake) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /servers", f.handle(CreateServer, f.createServer))
	mux.HandleFunc("GET /servers", f.handle(ListServers, f.listServers))
	mux.HandleFunc("GET /servers/{id}", f.handle(GetServer, f.getServer))
	mux.HandleFunc("DELETE /servers/{id}", f.handle(DeleteServer, f.deleteServer))
	mux.HandleFunc("POST /firewalls", f.handle(CreateFirewall, f.createFirewall))
	mux.HandleFunc("GET /firewalls", f.handle(ListFirewalls, f.listFirewalls))
	mux.HandleFunc("DELETE /firewalls/{id}", f.handle(DeleteFirewall, f.deleteFirewall))
	return mux
}

// answer is what an operation does: a status and a body, or an Error.
type answer = faultkit.Answer[Error]

// handle serves one call of op through the kit (its token, its faults),
// do running under the lock.
func (f *Fake) handle(op Op, do func(r *http.Request) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.Serve(w, r, &faultkit.Call[Op]{Op: op, Token: token}, func(*faultkit.Call[Op]) answer {
			f.mu.Lock()
			defer f.mu.Unlock()
			return do(r)
		})
	}
}

// write sends a as Hetzner does, with its rate-limit headers.
func write(w http.ResponseWriter, _ *faultkit.Call[Op], a answer) {
	if a.Err != nil {
		writeError(w, *a.Err, a.RetryAfter)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	faultkit.SetRateLimit(w.Header(), 3600, 3599, 0)
	w.WriteHeader(a.Status)
	_ = json.NewEncoder(w).Encode(a.Body)
}

func writeError(w http.ResponseWriter, e Error, retryAfter time.Duration) {
	body := schema.ErrorResponse{Error: schema.Error{Code: e.Code, Message: e.Message}}
	if len(e.Fields) > 0 {
		var details schema.ErrorDetailsInvalidInput
		for _, name := range e.Fields {
			details.Fields = append(details.Fields, struct {
				Name     string   `json:"name"`
				Messages []string `json:"messages"`
			}{Name: name, Messages: []string{"is invalid"}})
		}
		body.Error.DetailsRaw, _ = json.Marshal(details)
	}
	w.Header().Set("Content-Type", "application/json")
	if e.Status == http.StatusTooManyRequests {
		faultkit.SetRateLimit(w.Header(), 3600, 0, retryAfter)
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body)
}

func invalid(fields ...string) answer {
	return faultkit.Fail(Error{Status: 400, Code: "invalid_input", Message: "invalid input in fields '" + strings.Join(fields, "', '") + "'", Fields: fields})
}

func (f *Fake) createServer(r *http.Request) answer {
	var req schema.ServerCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return faultkit.Fail(Error{Status: 400, Code: "json_error", Message: err.Error()})
	}
	if bad := validateCreate(req); len(bad) > 0 {
		return invalid(bad...)
	}
	for _, s := range f.servers {
		if s.Name == req.Name {
			return faultkit.Fail(Error{Status: 409, Code: "uniqueness_error", Message: "server name is already used", Fields: []string{"name"}})
		}
	}
	if _, none := f.NoCapacity(req.ServerType.Name); none {
		return faultkit.Fail(ErrCapacity)
	}
	f.nextID++
	s := &server{Server: Server{
		ID: 1000 + f.nextID, Name: req.Name, Status: "initializing", ServerType: req.ServerType.Name,
		Location: req.Location, Image: req.Image.Name, UserData: req.UserData, Created: time.Now().UTC(),
		PublicIP: fmt.Sprintf("127.0.101.%d", f.nextID%250+1),
	}}
	s.Hide(f.opts.listLag)
	if f.opts.publicIP != nil {
		s.PublicIP = f.opts.publicIP(int(f.nextID))
	}
	if req.Labels != nil {
		s.Labels = *req.Labels
	}
	if req.PublicNet != nil {
		s.IPv6 = req.PublicNet.EnableIPv6
	}
	if s.IPv6 {
		s.IPv6Net = fmt.Sprintf("2001:db8:%x::/64", s.ID)
	}
	for _, fw := range req.Firewalls {
		s.Firewalls = append(s.Firewalls, fw.Firewall)
	}
	if f.opts.steps == 0 {
		s.Status = "running"
	}
	f.servers[s.ID] = s
	f.created = append(f.created, s.snapshot())
	f.boot(s)
	return answer{Status: http.StatusCreated, Body: schema.ServerCreateResponse{
		Server: s.schema(), Action: schema.Action{ID: s.ID, Command: "create_server", Status: "running", Started: s.Created},
	}}
}

// validateCreate names the invalid fields of a create, as Hetzner does.
func validateCreate(req schema.ServerCreateRequest) []string {
	var bad []string
	if !validName.MatchString(req.Name) {
		bad = append(bad, "name")
	}
	if !slices.Contains(DefaultServerTypes, req.ServerType.Name) {
		bad = append(bad, "server_type")
	}
	if !slices.Contains(DefaultImages, req.Image.Name) {
		bad = append(bad, "image")
	}
	if !slices.Contains(DefaultLocations, req.Location) {
		bad = append(bad, "location")
	}
	if len(req.UserData) > maxUserData {
		bad = append(bad, "user_data")
	}
	if req.Labels != nil {
		for k, v := range *req.Labels {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				bad = append(bad, "labels")
				break
			}
		}
	}
	return bad
}

func (f *Fake) getServer(r *http.Request) answer {
	s := f.byID(r.PathValue("id"))
	if s == nil {
		return faultkit.Fail(Error{Status: 404, Code: "not_found", Message: "server not found"})
	}
	body := schema.ServerGetResponse{Server: s.schema()}
	f.read(s)
	return answer{Status: http.StatusOK, Body: body}
}

func (f *Fake) deleteServer(r *http.Request) answer {
	s := f.byID(r.PathValue("id"))
	if s == nil {
		return faultkit.Fail(Error{Status: 404, Code: "not_found", Message: "server not found"})
	}
	if s.Status != "deleting" {
		s.Status, s.reads = "deleting", 0
		f.Halt(strconv.FormatInt(s.ID, 10))
		if f.opts.steps == 0 {
			delete(f.servers, s.ID)
		}
	}
	return answer{Status: http.StatusOK, Body: schema.ServerDeleteResponse{Action: schema.Action{ID: s.ID, Command: "delete_server", Status: "running"}}}
}

func (f *Fake) listServers(r *http.Request) answer {
	q := r.URL.Query()
	match, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		return invalid("label_selector")
	}
	var found []*server
	for _, id := range f.sortedIDs() {
		s := f.servers[id]
		if (q.Get("name") != "" && s.Name != q.Get("name")) || !match(s.Labels) {
			continue
		}
		if s.Shown() {
			found = append(found, s)
		}
	}
	shown, meta := paginate(q, found)
	body := struct {
		Servers []schema.Server `json:"servers"`
		Meta    schema.Meta     `json:"meta"`
	}{Servers: []schema.Server{}, Meta: meta}
	for _, s := range shown {
		body.Servers = append(body.Servers, s.schema())
		f.read(s)
	}
	return answer{Status: http.StatusOK, Body: body}
}

// maxPerPage is the most entries Hetzner answers a page with, whatever
// per_page asks (default 25).
const maxPerPage = 50

// paginate is the page of items the query's page and per_page ask for,
// and its pagination meta, as Hetzner pages every list.
func paginate[T any](q url.Values, items []T) ([]T, schema.Meta) {
	page, perPage := atLeast(q.Get("page"), 1), min(atLeast(q.Get("per_page"), 25), maxPerPage)
	from, to := min((page-1)*perPage, len(items)), min(page*perPage, len(items))
	meta := schema.Meta{Pagination: &schema.MetaPagination{
		Page: page, PerPage: perPage, TotalEntries: len(items), LastPage: max((len(items)+perPage-1)/perPage, 1),
	}}
	if to < len(items) {
		meta.Pagination.NextPage = page + 1
	}
	if page > 1 {
		meta.Pagination.PreviousPage = page - 1
	}
	return items[from:to], meta
}

// read counts a read that showed s, and moves it on after WithSteps reads.
func (f *Fake) read(s *server) {
	if s.reads++; s.reads < f.opts.steps {
		return
	}
	switch s.Status {
	case "initializing":
		s.Status, s.reads = "running", 0
	case "deleting":
		delete(f.servers, s.ID)
	}
}

func (f *Fake) byID(id string) *server {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil
	}
	return f.servers[n]
}

func (f *Fake) sortedIDs() []int64 { return slices.Sorted(maps.Keys(f.servers)) }

func atLeast(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil && n >= 1 {
		return n
	}
	return def
}

func (s *server) schema() schema.Server {
	out := schema.Server{
		ID: s.ID, Name: s.Name, Status: s.Status, Created: s.Created, Labels: s.Labels,
		ServerType: schema.ServerType{Name: s.ServerType},
		Location:   schema.Location{Name: s.Location},
		Image:      &schema.Image{Name: &s.Image},
		PublicNet:  schema.ServerPublicNet{IPv4: schema.ServerPublicNetIPv4{IP: s.PublicIP}},
	}
	if s.IPv6 {
		out.PublicNet.IPv6 = schema.ServerPublicNetIPv6{IP: s.IPv6Net}
	}
	for _, id := range s.Firewalls {
		out.PublicNet.Firewalls = append(out.PublicNet.Firewalls, schema.ServerFirewall{ID: id, Status: "applied"})
	}
	return out
}

// parseSelector reads Hetzner's label selectors: comma-separated k==v,
// k=v, k!=v, k and !k.
func parseSelector(sel string) (func(map[string]string) bool, error) {
	type term struct {
		key, value string
		op         string // "=", "!=", "exists", "!exists"
	}
	var terms []term
	for _, part := range strings.Split(sel, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.Contains(part, "!="):
			k, v, _ := strings.Cut(part, "!=")
			terms = append(terms, term{k, v, "!="})
		case strings.Contains(part, "=="):
			k, v, _ := strings.Cut(part, "==")
			terms = append(terms, term{k, v, "="})
		case strings.Contains(part, "="):
			k, v, _ := strings.Cut(part, "=")
			terms = append(terms, term{k, v, "="})
		case strings.HasPrefix(part, "!"):
			terms = append(terms, term{key: part[1:], op: "!exists"})
		default:
			terms = append(terms, term{key: part, op: "exists"})
		}
	}
	for _, t := range terms {
		if len(validation.IsQualifiedName(t.key)) > 0 {
			return nil, fmt.Errorf("label selector: bad key %q", t.key)
		}
	}
	return func(labels map[string]string) bool {
		for _, t := range terms {
			v, ok := labels[t.key]
			if (t.op == "=" && v != t.value) || (t.op == "!=" && v == t.value) || (t.op == "exists" && !ok) || (t.op == "!exists" && ok) {
				return false
			}
		}
		return true
	}, nil
}
