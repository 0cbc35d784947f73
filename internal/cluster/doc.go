// Package cluster gives each container one holder among the replicas that
// share a store, and carries runs to it (issue 28).
//
// A container's live interpreter is in the memory of one process. When a
// turn lands on another replica, running it there would start a second
// interpreter of the same container: two copies of its variables, each
// missing the other's turns. So the replicas agree on one holder per
// container through a lease in the shared store (Leases; redislease on
// Redis):
//
//   - A lease names its holder (Node.ID, random per process: a restarted
//     server is a new holder), where it takes forwarded runs (Addr), and a
//     fencing token that grows with every new holder.
//   - A replica takes the lease before it opens an interpreter for a
//     container, and confirms it before every run (Node.Claim): a holder
//     whose lease another replica took can no longer run (fencing), and
//     drops its interpreter (Config.OnLost).
//   - A run arriving on another replica is forwarded to the holder over
//     gRPC (Node.Forward; the service in rpc.go), authenticated with a
//     token every replica shares, and naming the lease it expects: the
//     holder refuses a run for a lease it does not hold with that token.
//     Runs of one container then serialise at the holder.
//   - A holder that is gone — unreachable, or restarted (another ID
//     answers at its address) — loses its lease to the first replica that
//     finds it so (Node.Steal, a compare-and-set on the token it saw),
//     which restores the container's last checkpoint. A lease that is not
//     renewed (kill -9) also expires after Config.TTL.
//   - A holder releases its lease when the interpreter closes (eviction,
//     expiry, drain), after its checkpoint is written.
//
// The package knows nothing of containers: keys are strings, forwarded
// runs are opaque bytes its Handler answers.
package cluster
