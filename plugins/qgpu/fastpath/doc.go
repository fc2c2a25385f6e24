// Package fastpath holds what keeps the QGPU plugin's Filter and Score cheap
// per node on large clusters, apart from the placement itself
// (docs/performance.md): finding a node's ledger entry from the NodeInfo
// kube-scheduler passes (Refs), carrying Filter's score of a node to Score
// (Stash), and NodeResourcesFit's check of the qGPU resources, taken over
// (TakeOverFit, FitRequest). The plugin's extension points call it; it
// decides nothing about placement.
//
// Invariants:
//
//   - Answers never depend on the tables: a lookup that misses (a full
//     table, a slot another node took, a NodeInfo that is not a
//     *framework.NodeInfo) falls back to the slow path (the ledger by name,
//     the NodeInfo's maps, Score placing the pod itself), which gives the
//     same answer. A table only saves work.
//   - Refs and Stash are keyed by a *framework.NodeInfo's address. A
//     NodeInfo of kube-scheduler's snapshot belongs to one node for its life
//     (the snapshot updates it in place), and an entry keeps its NodeInfo
//     reachable, so no other NodeInfo takes that address while it is held.
//   - What Refs keeps besides the ledger entry (what the node's pods
//     request) is tagged with the NodeInfo's generation it was read at, and
//     read only under an equal generation: kube-scheduler gives a NodeInfo a
//     new one whenever it changes.
//   - A Stash slot counts only in the cycle it was written in (Reset starts
//     one); PreFilter resets it, and kube-scheduler runs one cycle at a time
//     per profile, each profile with its own plugin. A slot is claimed by a
//     compare-and-swap, so two nodes never share one in a cycle.
//   - Every method is safe for the concurrent Filter calls of a cycle
//     (atomics only, no locks), and Get, Put and Requested allocate
//     nothing.
//   - TakeOverFit moves the qGPU resources out of NodeResourcesFit's state
//     only when that state is there, so exactly one of the two plugins
//     checks them; FitRequest.Check gives NodeResourcesFit's reasons and
//     codes.
package fastpath
