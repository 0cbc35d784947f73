package config

import "time"

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
	// MaxBackground and MaxBackgroundTotal bound the background responses
	// ("background": true) running at once, per credential and on this
	// server (a 429 past either). BackgroundLifetime bounds one run;
	// BackgroundEventsTTL is how long a streamed one's events stay
	// resumable after it ended.
	MaxBackground       int           `json:"max_background"`
	MaxBackgroundTotal  int           `json:"max_background_total"`
	BackgroundLifetime  time.Duration `json:"background_lifetime"`
	BackgroundEventsTTL time.Duration `json:"background_events_ttl"`
	// MaxResumedStreams and MaxResumedStreamsPerCredential bound the
	// resumed background streams (GET /v1/responses/{id}?stream=true) one
	// replica serves at once, in all and per credential (a 429 past
	// either): each waits on the store, with backend redis on a connection
	// of a pool of MaxResumedStreams kept apart from every other call's.
	MaxResumedStreams              int `json:"max_resumed_streams"`
	MaxResumedStreamsPerCredential int `json:"max_resumed_streams_per_credential"`
}

func defaultResponses() Responses {
	return Responses{
		TTL:              30 * 24 * time.Hour, // OpenAI's
		MaxResponseBytes: 16 * MiB,
		MaxHistory:       1000,
		MaxCount:         10000,
		MaxBytes:         256 * MiB,

		MaxBackground:       16,
		MaxBackgroundTotal:  64,
		BackgroundLifetime:  time.Hour,
		BackgroundEventsTTL: 24 * time.Hour,

		MaxResumedStreams:              128,
		MaxResumedStreamsPerCredential: 16,
	}
}

func (c *Config) validateResponses(v *validator) {
	r := c.Responses
	v.check(r.TTL > 0, "responses.ttl", "must be positive")
	v.check(r.MaxResponseBytes > 0, "responses.max_response_bytes", "must be positive")
	v.check(r.MaxHistory > 0, "responses.max_history", "must be positive")
	v.check(r.MaxCount > 0, "responses.max_count", "must be positive")
	v.check(r.MaxBytes >= r.MaxResponseBytes, "responses.max_bytes", "must be at least responses.max_response_bytes")
	v.check(r.MaxBackground >= 0 && r.MaxBackground <= 10000, "responses.max_background", "%d must be between 0 (none allowed) and 10000", r.MaxBackground)
	v.check(r.MaxBackgroundTotal >= r.MaxBackground && r.MaxBackgroundTotal <= 100000, "responses.max_background_total",
		"%d must be at least responses.max_background %d and at most 100000", r.MaxBackgroundTotal, r.MaxBackground)
	v.check(r.BackgroundLifetime >= time.Minute && r.BackgroundLifetime <= 24*time.Hour, "responses.background_lifetime", "%s must be between 1m and 24h", r.BackgroundLifetime)
	v.check(r.BackgroundEventsTTL >= time.Minute && r.BackgroundEventsTTL <= r.TTL, "responses.background_events_ttl",
		"%s must be at least 1m and at most responses.ttl %s", r.BackgroundEventsTTL, r.TTL)
	v.check(r.MaxResumedStreams >= 1 && r.MaxResumedStreams <= 10000, "responses.max_resumed_streams", "%d must be between 1 and 10000", r.MaxResumedStreams)
	v.check(r.MaxResumedStreamsPerCredential >= 1 && r.MaxResumedStreamsPerCredential <= r.MaxResumedStreams, "responses.max_resumed_streams_per_credential",
		"%d must be between 1 and responses.max_resumed_streams %d", r.MaxResumedStreamsPerCredential, r.MaxResumedStreams)
}

// Conversations bounds OpenAI's Conversations this server keeps (in the
// store's backend, like responses; without a TTL, as OpenAI keeps them).
type Conversations struct {
	// MaxItems and MaxBytes bound one conversation; a turn that would pass
	// them is answered but not appended (the log says so).
	MaxItems int      `json:"max_items"`
	MaxBytes ByteSize `json:"max_bytes"`
	// MaxPerOwner bounds the conversations of one credential.
	MaxPerOwner int `json:"max_per_owner"`
}

func defaultConversations() Conversations {
	return Conversations{MaxItems: 10000, MaxBytes: 64 * MiB, MaxPerOwner: 1000}
}

func (c *Config) validateConversations(v *validator) {
	cv := c.Conversations
	v.check(cv.MaxItems > 0, "conversations.max_items", "must be positive")
	v.check(cv.MaxBytes > 0, "conversations.max_bytes", "must be positive")
	v.check(cv.MaxPerOwner > 0, "conversations.max_per_owner", "must be positive")
}
