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
package blob
