package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// conn is what each of this package's stores holds of its Redis: the
// client, whether Close closes it, the key prefix and the clock. The
// stores embed it, so that connecting, checking and closing are written
// once.
type conn struct {
	rdb    goredis.UniversalClient
	own    bool // Close closes rdb: the store made it (dial)
	prefix string
	now    func() time.Time
}

// newConn checks that rdb answers PING and returns the conn of a store
// over it; now nil means time.Now.
func newConn(ctx context.Context, rdb goredis.UniversalClient, now func() time.Time, opts []Option) (conn, error) {
	if now == nil {
		now = time.Now
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return conn{}, fmt.Errorf("store/redis: ping: %w", err)
	}
	return conn{rdb: rdb, prefix: apply(opts).prefix, now: now}, nil
}

// dial connects to the Redis at url (redis://[user:pass@]host:port/db, or
// rediss:// for TLS) and makes a store over the new client with over (one
// of the New…Client functions); the store owns the client, which is
// closed again when over fails.
func dial[S interface{ owns() *bool }](ctx context.Context, url string, over func(ctx context.Context, rdb goredis.UniversalClient) (S, error)) (S, error) {
	var zero S
	o, err := goredis.ParseURL(url)
	if err != nil {
		return zero, fmt.Errorf("store/redis: url: %w", err)
	}
	rdb := goredis.NewClient(o)
	s, err := over(ctx, rdb)
	if err != nil {
		_ = rdb.Close()
		return zero, err
	}
	*s.owns() = true
	return s, nil
}

func (c *conn) owns() *bool { return &c.own }

// Close closes the connection pool the store made (dial); a client the
// caller passed in stays open.
func (c *conn) Close() error {
	if !c.own {
		return nil
	}
	return c.rdb.Close()
}
