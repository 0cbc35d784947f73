package config

import (
	"time"

	"github.com/codeinterp/codeinterp/store"
)

// Responses bounds the responses this server keeps (so that
// previous_response_id, item_reference and GET /v1/responses/{id} work in
// front of any model server). They live in the store's backend: in process
// with store.backend memory, in Redis with store.backend redis.
type Responses struct {
	// TTL is how long a response is kept after it was made (OpenAI keeps
	// them 30 days).
	TTL time.Duration `json:"ttl"`
	// MaxResponseBytes bounds one stored response (its object, input and
	// what the model saw); a larger one is answered but not kept.
	MaxResponseBytes ByteSize `json:"max_response_bytes"`
	// MaxHistory bounds the turns of a conversation continued through
	// previous_response_id.
	MaxHistory int `json:"max_history"`
	// MaxCount and MaxBytes bound all responses kept in process (backend
	// memory), which forgets the oldest to stay within them. Redis relies on
	// TTL and its own maxmemory.
	MaxCount int      `json:"max_count"`
	MaxBytes ByteSize `json:"max_bytes"`
}

func defaultResponses() Responses {
	d := store.DefaultResponseLimits()
	return Responses{
		TTL:              d.TTL,
		MaxResponseBytes: ByteSize(d.ResponseBytes),
		MaxHistory:       d.MaxHistory,
		MaxCount:         d.Count,
		MaxBytes:         ByteSize(d.Bytes),
	}
}

// ResponseLimits are the bounds of the response store.
func (c *Config) ResponseLimits() store.ResponseLimits {
	r := c.Responses
	return store.ResponseLimits{
		TTL:           r.TTL,
		ResponseBytes: int64(r.MaxResponseBytes),
		MaxHistory:    r.MaxHistory,
		Count:         r.MaxCount,
		Bytes:         int64(r.MaxBytes),
	}
}

func (c *Config) validateResponses(v *validator) {
	r := c.Responses
	v.check(r.TTL > 0, "responses.ttl", "must be positive")
	v.check(r.MaxResponseBytes > 0, "responses.max_response_bytes", "must be positive")
	v.check(r.MaxHistory > 0, "responses.max_history", "must be positive")
	v.check(r.MaxCount > 0, "responses.max_count", "must be positive")
	v.check(r.MaxBytes >= r.MaxResponseBytes, "responses.max_bytes", "must be at least responses.max_response_bytes")
	switch c.Interceptor.History {
	case "auto", "upstream", "expand":
	default:
		v.add("interceptor.history", "%q is not one of auto, upstream, expand", c.Interceptor.History)
	}
}
