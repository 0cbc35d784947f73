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
//     container, and confirms it before every run (Node.Claim) and
//     before a run's result is reported (Node.Confirm): a holder whose
//     lease another replica took, or that was paused past it, reports
//     the run as failed and drops its interpreter (Config.OnLost also
//     cancels its runs in flight).
//   - A run arriving on another replica is forwarded to the holder over
//     gRPC (Node.Forward; the service in rpc.go), naming the lease it
//     expects: the holder refuses a run for a lease it does not hold with
//     that token. Runs of one container then serialise at the holder.
//     A caller that wants a run's progress (a shell's live output) sends
//     it by RunStream, the server-streaming twin of the unary Run: the
//     same request, metadata and checks, the Handler's pieces as
//     messages before its answer; a holder of a build without RunStream
//     refuses the method before reading the run, which then goes unary.
//   - The channel trusts nothing but the cluster key (key.go): every
//     replica derives the same Ed25519 key pair from Config.Secret
//     (HKDF-SHA256) and the connection is TLS 1.3 in which both sides
//     must present a certificate for exactly that public key. A replica
//     sends nothing but its handshake to an address that has not proven
//     the key — a lease's addr rewritten in the store gets no run, code,
//     output or secret — and the server reads nothing of gRPC from a
//     client that has not (handshakes bounded in time, 64 streams a
//     connection, compressed requests refused; MaxMessageBytes only for
//     authenticated peers). A peer with another key is ErrUnreachable
//     (one warning per address), never ErrGone: a stranger's answer never
//     takes a lease. The secret itself is never sent nor kept in the
//     store. Who holds the key is trusted as a replica.
//   - A holder is taken from only when it is proven gone — another
//     process (another ID) answers at its address: Node.Steal, a
//     compare-and-set on the token seen — or when its lease expired by
//     the store's clock (nothing renewed it: kill -9, a pause, a
//     partition), after which Claim takes it. A holder that merely cannot
//     be reached (ErrUnreachable) is waited for: a paused process and a
//     dead one look the same from outside.
//   - Fencing fails closed: a lease store that cannot be asked (down,
//     timing out) means no run anywhere, never a run on a guess; the
//     lease scripts still run on a full Redis (allow-oom). A renewal
//     never takes a lease back (it may have been another replica's in
//     the meantime): a lease the store no longer has, another's, or one
//     not renewed for a whole TTL is lost. Tokens never repeat, across
//     Redis restarts too (the counter restarts from the store's clock),
//     so the checkpoint store can refuse writes under an older token.
//   - A holder releases its lease when the interpreter closes (eviction,
//     expiry, drain), after its checkpoint is written.
//
// What a lease cannot do: a holder paused right after a run was
// confirmed, and past its lease before that run's state was checkpointed
// (checkpoints.after), loses that state; the next holder restores the
// checkpoint before it and says so (the head is marked running).
//
// The package knows nothing of containers: keys are strings, forwarded
// runs are opaque bytes its Handler answers.
package cluster
