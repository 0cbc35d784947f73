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
// server sealed for that binding: another owner's, another container's,
// one of another runtime, a tampered or truncated one, one under another
// key. A refused checkpoint is treated as no checkpoint (a fresh
// interpreter, and the model is told its variables were reset).
//
// Where sealed checkpoints live is a blob store (package checkpoint/blob):
// a directory on one host or a shared volume, or S3-compatible object
// storage for a cluster. Large blobs never go to Redis.
//
// The key comes from the configuration (a Secret, base64) or, on one host,
// from a key file the server generates with mode 0600 (LoadKey).
package checkpoint
