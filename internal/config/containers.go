package config

// Containers is what OpenAI's container lifecycle leaves to the operator.
type Containers struct {
	// RestoreExpired revives a container used after its expiry — its
	// files and its checkpoint, kept checkpoints.ttl after it expired —
	// instead of OpenAI's 400 "Container is expired.". Off by default:
	// OpenAI's behaviour. Meanwhile an expired container's files count
	// against its owner's bytes (store.limits.owner_bytes), not its
	// containers.
	RestoreExpired bool `json:"restore_expired"`
}
