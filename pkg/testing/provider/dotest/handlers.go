package dotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/digitalocean/godo"
)

// maxUserData is DigitalOcean's limit on user-data.
const maxUserData = 64 * 1024

var validTag = regexp.MustCompile(`^[a-zA-Z0-9_:-]{1,255}$`)

func (f *Fake) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/droplets", f.handle(CreateDroplet, f.createDroplet))
	mux.HandleFunc("GET /v2/droplets", f.handle(ListDroplets, f.listDroplets))
	mux.HandleFunc("GET /v2/droplets/{id}", f.handle(GetDroplet, f.getDroplet))
	mux.HandleFunc("DELETE /v2/droplets/{id}", f.handle(DeleteDroplet, f.deleteDroplet))
	mux.HandleFunc("POST /v2/tags", f.handle(CreateTag, f.createTag))
	mux.HandleFunc("POST /v2/firewalls", f.handle(CreateFirewall, f.createFirewall))
	mux.HandleFunc("GET /v2/firewalls", f.handle(ListFirewalls, f.listFirewalls))
	mux.HandleFunc("DELETE /v2/firewalls/{id}", f.handle(DeleteFirewall, f.deleteFirewall))
	return mux
}

// answer is what an operation does: a status and a body, or an Error.
type answer struct {
	status int
	body   any
	err    *Error
}

// scopesOf are the scopes a call needs (API reference, each endpoint's
// "Required scopes"): tagging a droplet at creation needs tag:create too.
func scopesOf(op Op, body []byte) []string {
	switch op {
	case CreateDroplet:
		var req struct {
			Tags []string `json:"tags"`
		}
		if json.Unmarshal(body, &req) == nil && len(req.Tags) > 0 {
			return []string{"droplet:create", "tag:create"}
		}
		return []string{"droplet:create"}
	case DeleteDroplet:
		return []string{"droplet:delete"}
	case CreateTag:
		return []string{"tag:create"}
	case CreateFirewall:
		return []string{"firewall:create"}
	case ListFirewalls:
		return []string{"firewall:read"}
	case DeleteFirewall:
		return []string{"firewall:delete"}
	}
	return []string{"droplet:read"}
}

// handle runs one call under the lock: authorization and scopes, the
// faults before the effect, the effect, and the faults after it.
func (f *Fake) handle(op Op, do func(r *http.Request, body []byte) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readAll(r)
		if err != nil {
			writeError(w, Error{Status: 400, ID: "bad_request", Message: err.Error()})
			return
		}
		f.mu.Lock()
		f.calls[op]++
		now := time.Now()
		if now.Before(f.notBefore) {
			f.earlyCalls++
		}
		if r.Header.Get("Authorization") != "Bearer "+Token {
			f.mu.Unlock()
			writeError(w, Error{Status: 401, ID: "unauthorized", Message: "Unable to authenticate you."})
			return
		}
		for _, scope := range scopesOf(op, body) {
			if !slices.Contains(f.opts.scopes, scope) {
				f.mu.Unlock()
				writeError(w, Error{Status: 403, ID: "forbidden", Message: "You are not authorized to perform this operation (missing scope " + scope + ")"})
				return
			}
			f.usedScopes[scope] = true
		}
		if e, ok := f.faultBefore(op, now); ok {
			f.mu.Unlock()
			writeError(w, e)
			return
		}
		a := do(r, body)
		lose := f.lost[op] > 0 || (a.err == nil && f.draw() && f.random.IntN(2) == 0)
		if f.lost[op] > 0 {
			f.lost[op]--
		}
		hold := f.holds[op]
		f.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if lose {
			dropConnection(w)
			return
		}
		if a.err != nil {
			writeError(w, *a.err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("RateLimit-Limit", "5000")
		w.Header().Set("RateLimit-Remaining", "4999")
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(now.Unix(), 10))
		w.WriteHeader(a.status)
		if a.body != nil {
			_ = json.NewEncoder(w).Encode(a.body)
		}
	}
}

// faultBefore is the error a call gets before any effect: an injected one,
// or a random one.
func (f *Fake) faultBefore(op Op, now time.Time) (Error, bool) {
	if errs := f.faults[op]; len(errs) > 0 {
		f.faults[op] = errs[1:]
		if errs[0].RetryAfter > 0 {
			f.notBefore, f.earlyCalls = now.Add(errs[0].RetryAfter), 0
		}
		return errs[0], true
	}
	if !f.draw() {
		return Error{}, false
	}
	kinds := []Error{ErrServerError, ErrUnavailable, ErrRateLimited}
	if op == CreateDroplet {
		kinds = append(kinds, ErrCapacity)
	}
	return kinds[f.random.IntN(len(kinds))], true
}

// draw is one random draw of SetRandomFaults.
func (f *Fake) draw() bool { return f.random != nil && f.random.Float64() < f.rate }

func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func writeError(w http.ResponseWriter, e Error) {
	w.Header().Set("Content-Type", "application/json")
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("RateLimit-Limit", "5000")
		w.Header().Set("RateLimit-Remaining", "0")
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(time.Now().Add(e.RetryAfter).Unix(), 10))
		w.Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter.Seconds())))
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": e.ID, "message": e.Message, "request_id": "dotest"})
}

func invalid(what string) answer {
	return answer{err: &Error{Status: 422, ID: "unprocessable_entity", Message: "You specified an invalid " + what + " for Droplet creation."}}
}

func (f *Fake) createDroplet(_ *http.Request, body []byte) answer {
	// godo sends the image as its slug or its numeric ID.
	var req struct {
		godo.DropletCreateRequest
		Image any `json:"image"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return answer{err: &Error{Status: 400, ID: "bad_request", Message: err.Error()}}
	}
	image, _ := req.Image.(string)
	switch {
	case req.Name == "":
		return invalid("name")
	case !slices.Contains(DefaultSizes, req.Size):
		return invalid("size")
	case !slices.Contains(DefaultImages, image):
		return invalid("image")
	case !slices.Contains(DefaultRegions, req.Region):
		return invalid("region")
	case len(req.UserData) > maxUserData:
		return answer{err: &Error{Status: 422, ID: "unprocessable_entity", Message: "user_data is too long (maximum is 64 KiB)"}}
	case slices.ContainsFunc(req.Tags, func(t string) bool { return !validTag.MatchString(t) }):
		return answer{err: &Error{Status: 422, ID: "unprocessable_entity", Message: "Tag names may only contain letters, numbers, colons, dashes and underscores"}}
	case f.noCap[req.Size]:
		return answer{err: &ErrCapacity}
	}
	f.nextID++
	d := &droplet{Droplet: Droplet{
		ID: 3000 + f.nextID, Name: req.Name, Status: "new", Size: req.Size, Region: req.Region,
		Image: image, Tags: slices.Clone(req.Tags), UserData: req.UserData, IPv6: req.IPv6,
		VPCUUID: req.VPCUUID, Created: time.Now().UTC().Truncate(time.Second),
		PublicIP: fmt.Sprintf("127.0.104.%d", f.nextID%250+1),
	}}
	if f.opts.publicIP != nil {
		d.PublicIP = f.opts.publicIP(f.nextID)
	}
	if f.opts.steps == 0 {
		d.Status = "active"
	}
	f.droplets[d.ID] = d
	f.created = append(f.created, d.snapshot())
	if f.opts.boot != nil {
		d.halt = f.opts.boot(d.snapshot())
	}
	return answer{status: http.StatusAccepted, body: map[string]any{
		"droplet": d.godo(),
		"links":   map[string]any{"actions": []map[string]any{{"id": d.ID, "rel": "create", "href": "/v2/actions/" + strconv.Itoa(d.ID)}}},
	}}
}

func (f *Fake) getDroplet(r *http.Request, _ []byte) answer {
	d := f.byID(r.PathValue("id"))
	if d == nil {
		return answer{err: &Error{Status: 404, ID: "not_found", Message: "The resource you were accessing could not be found."}}
	}
	body := map[string]any{"droplet": d.godo()}
	f.read(d)
	return answer{status: http.StatusOK, body: body}
}

func (f *Fake) deleteDroplet(r *http.Request, _ []byte) answer {
	d := f.byID(r.PathValue("id"))
	if d == nil {
		return answer{err: &Error{Status: 404, ID: "not_found", Message: "The resource you were accessing could not be found."}}
	}
	if d.halt != nil {
		d.halt()
	}
	delete(f.droplets, d.ID)
	return answer{status: http.StatusNoContent}
}

func (f *Fake) listDroplets(r *http.Request, _ []byte) answer {
	q := r.URL.Query()
	tag := q.Get("tag_name")
	var found []*droplet
	for _, id := range f.sortedIDs() {
		d := f.droplets[id]
		if tag != "" && !slices.Contains(d.Tags, tag) {
			continue
		}
		if d.listed++; d.listed <= f.opts.listLag {
			continue // not listed yet
		}
		found = append(found, d)
	}
	page, perPage := atLeast(q.Get("page"), 1), min(atLeast(q.Get("per_page"), 20), 200)
	from, to := min((page-1)*perPage, len(found)), min(page*perPage, len(found))
	droplets := []godo.Droplet{}
	for _, d := range found[from:to] {
		droplets = append(droplets, d.godo())
		f.read(d)
	}
	pages := map[string]string{}
	if to < len(found) {
		next := *r.URL
		q.Set("page", strconv.Itoa(page+1))
		next.RawQuery = q.Encode()
		pages["next"] = "http://" + r.Host + next.String()
	}
	return answer{status: http.StatusOK, body: map[string]any{
		"droplets": droplets, "links": map[string]any{"pages": pages}, "meta": map[string]int{"total": len(found)},
	}}
}

// read counts a read that showed d, and makes it active after WithSteps reads.
func (f *Fake) read(d *droplet) {
	if d.reads++; d.reads >= f.opts.steps && d.Status == "new" {
		d.Status = "active"
	}
}

func (f *Fake) byID(id string) *droplet {
	n, err := strconv.Atoi(id)
	if err != nil {
		return nil
	}
	return f.droplets[n]
}

func atLeast(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil && n >= 1 {
		return n
	}
	return def
}

func (d *droplet) godo() godo.Droplet {
	out := godo.Droplet{
		ID: d.ID, Name: d.Name, Status: d.Status, SizeSlug: d.Size, Created: d.Created.Format(time.RFC3339),
		Region: &godo.Region{Slug: d.Region}, Image: &godo.Image{Slug: d.Image}, Tags: slices.Clone(d.Tags),
		VolumeIDs: []string{}, VPCUUID: d.VPCUUID,
		Networks: &godo.Networks{V4: []godo.NetworkV4{{IPAddress: d.PublicIP, Type: "public"}}},
	}
	if d.IPv6 {
		out.Networks.V6 = []godo.NetworkV6{{IPAddress: "2001:db8::1", Type: "public"}}
	}
	return out
}
