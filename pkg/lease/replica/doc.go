// Package replica replicates the lease store's state across the operator's
// replicas with Raft (github.com/hashicorp/raft, the engine of Consul,
// Nomad and Vault), so that a change of leader loses nothing
// (docs/decisions/0380-lease-store-replicated-with-raft.md):
//
//   - Every replica keeps the committed store (fsm.go): a follower store
//     (store.Config.Follower) that applies each committed log entry, a
//     batch of one decision's effects, and makes the Raft snapshots.
//   - The Raft leader also keeps the working store: a copy of the committed
//     one, promoted (store.Store.Promote), that decides. Its journal
//     (journal.go) hands each decision's effects to the log as one entry,
//     and the decision's caller answers once the entry is committed. The
//     renewals that keep their TTL stay out of the log: the next leader's
//     Promote makes up for them.
//   - A leader that stops leading stops the process (Run returns an
//     error): its working store may hold decisions the log never took, so
//     it starts again clean, from its snapshot and log.
//   - Peers talk over one TLS port with client certificates (peers.go):
//     Raft's transport and the forwarding of lease calls to the leader
//     (forward.go) are told apart by ALPN.
//
// It does not decide leases (pkg/lease/store does), serve the lease API
// (pkg/lease/server does) or find its peers (the operator's membership does,
// through the API server).
package replica
