// Package dashboard is the operator's read-only web UI (docs/dashboard.md):
// the fleet, a pool's members and the leases in use, served at /ui/ beside
// the lease API and pushed live to each viewer.
//
// It is built in three parts: a view model made by pure functions from the
// informers' objects and the lease store's leases (model.go), a hub that
// rebuilds it once per change, debounced, and wakes the viewers
// (hub.go), and the HTTP handlers that authenticate a viewer with the lease
// API's authenticator, filter the view to the namespaces the viewer may
// list, and stream it (handler.go). What a viewer may list is decided per
// identity before its stream takes a slot (access.go, slots.go), reviewed
// only in the namespaces whose RoleBindings name it (bindings.go). The
// page itself is plain HTML, CSS and JavaScript embedded in the binary
// (assets/).
//
// It writes nothing, polls no API server, and never carries a lease ID,
// credential, Secret or session state: its Lease type has no field for
// one, and the model copies only named fields of the objects it reads.
package dashboard
