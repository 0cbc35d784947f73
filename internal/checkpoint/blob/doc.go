// Package blob is where sealed checkpoints are kept: a Store of whole
// blobs by key, with one implementation per kind of storage — dir (a
// directory: one host, or a ReadWriteMany volume shared by replicas) and
// s3 (S3-compatible object storage, for clusters). blobtest holds the
// conformance suite both pass.
//
// A Store never holds a blob in part: Put replaces a key's blob
// atomically, so a reader (on any replica) sees the previous checkpoint
// or the new one, whole, and a crash during Put leaves the previous one.
// Blobs are already sealed (package checkpoint) when they reach a Store,
// so a Store needs no encryption of its own and can be trusted with
// nothing: what it returns is authenticated before use.
//
// Every read is bounded: Get and GetVersion take the most bytes the
// caller will accept, and a larger blob is ErrTooLarge, read no further
// than the bound (a blob that grew in the store is an error, not an
// allocation of its size).
//
// Every Store is Conditional too: PutIf writes a key only if it still
// holds the version the writer read (or, create-only, none), atomically
// against other PutIfs, and ErrPrecondition tells the writer to read
// again. dir does it with an exclusive flock on a lock file beside the key
// around a compare (versions are hashes of the content) and a rename; s3
// with S3 conditional writes (If-Match: <ETag>, If-None-Match: *), which
// it checks the server honours when it starts.
package blob
