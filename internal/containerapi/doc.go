// Package containerapi is what a response sees of a container: Spec (what
// the request declared), Container (its files, its runs, its network
// policy), File, RunResult, the errors callers branch on, and how file
// paths and sizes are written for the model. The interceptor and the
// containers manager meet here, so neither imports the other: package
// containers implements these, the interceptor consumes them. A leaf
// beside sandbox and allowlist.
package containerapi
