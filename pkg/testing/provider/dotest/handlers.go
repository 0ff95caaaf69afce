package dotest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
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
type answer = faultkit.Answer[Error]

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

// handle serves one call of op through the kit (its token and scopes, its
// faults), do running under the lock.
func (f *Fake) handle(op Op, do func(r *http.Request, body []byte) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// At most twice the user-data limit beside the rest of a create.
		body, err := io.ReadAll(io.LimitReader(r.Body, 4*maxUserData))
		if err != nil {
			writeError(w, Error{Status: 400, ID: "bad_request", Message: err.Error()}, 0)
			return
		}
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.Serve(w, r, &faultkit.Call[Op]{Op: op, Token: token, Needs: scopesOf(op, body)}, func(*faultkit.Call[Op]) answer {
			f.mu.Lock()
			defer f.mu.Unlock()
			return do(r, body)
		})
	}
}

// denied is DigitalOcean's answer to an unknown token, or to a token
// without a scope the call needs.
func denied(_ *faultkit.Call[Op], d faultkit.Denial) Error {
	if d.Reason == faultkit.NotPermitted {
		return Error{Status: 403, ID: "forbidden", Message: "You are not authorized to perform this operation (missing scope " + d.Permission + ")"}
	}
	return Error{Status: 401, ID: "unauthorized", Message: "Unable to authenticate you."}
}

// write sends a as DigitalOcean does, with its rate-limit headers.
func write(w http.ResponseWriter, _ *faultkit.Call[Op], a answer) {
	if a.Err != nil {
		writeError(w, *a.Err, a.RetryAfter)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	faultkit.SetRateLimit(w.Header(), 5000, 4999, 0)
	w.WriteHeader(a.Status)
	if a.Body != nil {
		_ = json.NewEncoder(w).Encode(a.Body)
	}
}

func writeError(w http.ResponseWriter, e Error, retryAfter time.Duration) {
	w.Header().Set("Content-Type", "application/json")
	if e.Status == http.StatusTooManyRequests {
		faultkit.SetRateLimit(w.Header(), 5000, 0, retryAfter)
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": e.ID, "message": e.Message, "request_id": "dotest"})
}

func invalid(what string) answer {
	return faultkit.Fail(Error{Status: 422, ID: "unprocessable_entity", Message: "You specified an invalid " + what + " for Droplet creation."})
}

func (f *Fake) createDroplet(_ *http.Request, body []byte) answer {
	// godo sends the image as its slug or its numeric ID.
	var req struct {
		godo.DropletCreateRequest
		Image any `json:"image"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return faultkit.Fail(Error{Status: 400, ID: "bad_request", Message: err.Error()})
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
		return faultkit.Fail(Error{Status: 422, ID: "unprocessable_entity", Message: "user_data is too long (maximum is 64 KiB)"})
	case slices.ContainsFunc(req.Tags, func(t string) bool { return !validTag.MatchString(t) }):
		return faultkit.Fail(Error{Status: 422, ID: "unprocessable_entity", Message: "Tag names may only contain letters, numbers, colons, dashes and underscores"})
	}
	if _, none := f.NoCapacity(req.Size); none {
		return faultkit.Fail(ErrCapacity)
	}
	f.nextID++
	d := &droplet{Droplet: Droplet{
		ID: 3000 + f.nextID, Name: req.Name, Status: "new", Size: req.Size, Region: req.Region,
		Image: image, Tags: slices.Clone(req.Tags), UserData: req.UserData, IPv6: req.IPv6,
		VPCUUID: req.VPCUUID, Created: time.Now().UTC().Truncate(time.Second),
		PublicIP: fmt.Sprintf("127.0.104.%d", f.nextID%250+1),
	}}
	d.Hide(f.opts.listLag)
	if f.opts.publicIP != nil {
		d.PublicIP = f.opts.publicIP(f.nextID)
	}
	if f.opts.steps == 0 {
		d.Status = "active"
	}
	f.droplets[d.ID] = d
	f.created = append(f.created, d.snapshot())
	f.boot(d)
	return answer{Status: http.StatusAccepted, Body: map[string]any{
		"droplet": d.godo(),
		"links":   map[string]any{"actions": []map[string]any{{"id": d.ID, "rel": "create", "href": "/v2/actions/" + strconv.Itoa(d.ID)}}},
	}}
}

func (f *Fake) getDroplet(r *http.Request, _ []byte) answer {
	d := f.byID(r.PathValue("id"))
	if d == nil {
		return faultkit.Fail(Error{Status: 404, ID: "not_found", Message: "The resource you were accessing could not be found."})
	}
	body := map[string]any{"droplet": d.godo()}
	f.read(d)
	return answer{Status: http.StatusOK, Body: body}
}

func (f *Fake) deleteDroplet(r *http.Request, _ []byte) answer {
	d := f.byID(r.PathValue("id"))
	if d == nil {
		return faultkit.Fail(Error{Status: 404, ID: "not_found", Message: "The resource you were accessing could not be found."})
	}
	f.Halt(strconv.Itoa(d.ID))
	delete(f.droplets, d.ID)
	return answer{Status: http.StatusNoContent}
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
		if d.Shown() {
			found = append(found, d)
		}
	}
	shown, links := paginate(r, found)
	droplets := []godo.Droplet{}
	for _, d := range shown {
		droplets = append(droplets, d.godo())
		f.read(d)
	}
	return answer{Status: http.StatusOK, Body: map[string]any{"droplets": droplets, "links": links, "meta": map[string]int{"total": len(found)}}}
}

// paginate is the page of items the request's page and per_page ask for
// (default 20, at most 200), and its links, as DigitalOcean pages every
// list: godo reads the next page's number from links.pages.next.
func paginate[T any](r *http.Request, items []T) ([]T, map[string]any) {
	q := r.URL.Query()
	page, perPage := atLeast(q.Get("page"), 1), min(atLeast(q.Get("per_page"), 20), 200)
	from, to := min((page-1)*perPage, len(items)), min(page*perPage, len(items))
	pageURL := func(n int) string {
		u := *r.URL
		q.Set("page", strconv.Itoa(n))
		u.RawQuery = q.Encode()
		return "http://" + r.Host + u.String()
	}
	pages := map[string]string{}
	if page > 1 {
		pages["first"], pages["prev"] = pageURL(1), pageURL(page-1)
	}
	if to < len(items) {
		pages["next"], pages["last"] = pageURL(page+1), pageURL((len(items)+perPage-1)/perPage)
	}
	return items[from:to], map[string]any{"pages": pages}
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
