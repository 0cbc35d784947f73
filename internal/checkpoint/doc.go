// Package checkpoint keeps a container's interpreter state outside the
// process that holds it, so that another replica, a restarted server or
// the same server after an eviction can restore it (issue 28).
//
// A checkpoint holds the user's data, and for gVisor a kernel image that
// the sentry deserialises on the host side: it is an attack surface. So
// every checkpoint is sealed (Sealer): encrypted and authenticated with
// AES-256-GCM under a key only the servers hold, and bound to what it is
// (Binding: the owner, the container, and the runtime it was made from —
// provider, runtime or root, runsc, snapshot). Open refuses, before a byte
// of it reaches a worker or runsc, anything that is not exactly what this
// server sealed for that binding, and says which of two kinds it is:
//
//   - ErrRefused: never usable by anyone — not a checkpoint, tampered,
//     truncated, another owner's or container's, or a head and state that
//     disagree. A refused checkpoint is no checkpoint (a fresh interpreter,
//     and the model is told its variables were reset), and may be dropped.
//   - ErrForeign: sealed under another key, in a format version this build
//     does not read, or for another origin (a runtime or build that is not
//     this server's: a rolling update runs two). This server cannot use it
//     but another may: it must not be dropped. The key id and a hash of the
//     origin are in the clear header (format 2) for that; format 1 had no
//     origin id, so a format 1 checkpoint that fails its tag is foreign.
//
// ErrForeign does not match ErrRefused, and a blob store's error (the store
// is down, slow, or a read timed out) is neither: it is returned as is,
// transient, and nothing may be dropped for it.
//
// Where sealed checkpoints live is a blob store (package checkpoint/blob):
// a directory on one host or a shared volume, or S3-compatible object
// storage for a cluster. Large blobs never go to Redis. Every read is
// bounded (a head by 1 KiB, a state by max_bytes plus the seal's overhead,
// a base by its own bound): a blob that grew in the store is an error, not
// an allocation of its size.
//
// # Fencing
//
// A cluster's holder of a container writes its checkpoints under a fence:
// the lease token it holds (Save, MarkRunning), tokens that only grow. The
// container's head records the highest fence any write was made under,
// and is only ever written by compare-and-set (a flock'd compare-and-rename
// in a directory, If-Match / If-None-Match in S3), after the write's state
// went to a key of its own. So:
//
//   - A write under a fence below the head's is refused (ErrFenced, counted
//     in codeinterp_checkpoint_fenced_writes_total) and changes nothing
//     that Load or Head return: a holder that lost its lease (paused,
//     partitioned) cannot overwrite the checkpoint of the holder after it,
//     even if its write was under way when the lease moved.
//   - Two writers racing cannot interleave: one compare-and-set wins, the
//     other reads the head again and decides again (refused if its fence
//     is now below; otherwise it goes after the winner — equal fences are
//     the same lease, last write wins). A loser's state is removed; the
//     state the head names is never overwritten.
//   - The fence is sealed with the state, next to its token, and Load
//     checks the head and the state agree: a head pointed at another
//     write's state is refused.
//   - MarkRunning under a higher fence raises the head's: the holder that
//     runs code on a checkpoint fences out older holders before its own
//     first save.
//
// What fencing does not do:
//
//   - It is only as good as the fences writers pass. A fence of 0 (no
//     cluster, one server) is never refused — and never lowers the head's
//     fence, so a fenced holder stays fenced — but two unfenced writers are
//     ordered only by compare-and-set: the last write wins.
//   - It orders writes, not runs: a stale holder can still run code and
//     answer a client; the run must be refused by the lease itself (the
//     caller's check), only its checkpoint is refused here.
//   - Drop and the expiry sweep are not fenced: they delete whatever is
//     kept. A caller must not Drop because its own Save was fenced or
//     failed transiently.
//   - The head is not authenticated: someone who can write the store can
//     roll a container back to an older intact checkpoint of its own (a
//     head and state taken together), or delete it; they cannot forge,
//     alter or move state between owners or containers.
//   - A save whose head write got no answer (a timeout) may or may not
//     have landed; its state is kept either way, and if it did not land it
//     is left over until the expiry sweep or a Drop removes it.
//
// # Formats
//
// Format 2 (this one) writes a JSON head naming "state-<fence>-<random>"
// and seals with an origin id. Folders of format 1 (a head "<token>" or
// "<token> running", the state at "state", no fence) still load, take
// MarkRunning, and are replaced by the next save. The reverse does not
// hold: a build before format 2 finds no checkpoint in a folder this one
// wrote, and refuses a base or state sealed in format 2.
//
// The key comes from the configuration (a Secret, base64) or, on one host,
// from a key file the server generates with mode 0600 (LoadKey).
package checkpoint
