package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// DefaultPrefix starts every key the store writes, so one Redis can be
// shared with other applications (or other codeinterp deployments, each
// with its own prefix).
const DefaultPrefix = "codeinterp:"

// putRetries bounds PutFile's optimistic retries when another writer
// replaces the same path between its read and its script.
const putRetries = 8

// Store is the Redis store. It is safe for concurrent use, and any number
// of Stores (replicas) may share one Redis.
type Store struct {
	conn
	limits  store.Limits
	scripts scripts
}

var _ store.Store = (*Store)(nil)

// Option configures New and NewClient, NewResponses and
// NewResponsesClient, and NewConversations and NewConversationsClient: one
// set of options for the three stores, which may share one Redis (under
// one prefix their keys — c:, f:, resp:, conv: and the rest — stay apart).
type Option func(*options)

// options are what Options set.
type options struct {
	prefix string
	// readers is the size of NewBackground's pool for the reads that
	// wait (0: store.BackgroundReaders).
	readers int
	// bgBytes bounds Background's logs, all together (0:
	// store.BackgroundAllBytes).
	bgBytes int64
}

// WithPrefix sets the key prefix (default DefaultPrefix).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithReaders sets how many connections NewBackground keeps for the reads
// that wait (XREAD BLOCK) — the resumed streams one replica serves at once
// (responses.max_resumed_streams); default store.BackgroundReaders.
func WithReaders(n int) Option { return func(o *options) { o.readers = n } }

// WithBackgroundBytes sets the bound on a Background's event logs, all
// owners' together (default store.BackgroundAllBytes; tests lower it).
// Every replica sharing the Redis must set the same.
func WithBackgroundBytes(n int64) Option { return func(o *options) { o.bgBytes = n } }

// apply returns the options opts set over the defaults.
func apply(opts []Option) options {
	o := options{prefix: DefaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// New connects to the Redis at url (redis://[user:pass@]host:port/db, or
// rediss:// for TLS) and checks it answers PING. limits bound what the
// store holds; now is the clock (tests), nil means time.Now.
func New(ctx context.Context, url string, limits store.Limits, now func() time.Time, opts ...Option) (*Store, error) {
	return dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Store, error) {
		return NewClient(ctx, rdb, limits, now, opts...)
	})
}

// NewClient is New over a client the caller made (and closes: the
// Store's Close leaves it open).
func NewClient(ctx context.Context, rdb goredis.UniversalClient, limits store.Limits, now func() time.Time, opts ...Option) (*Store, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	return &Store{conn: c, limits: limits, scripts: newScripts()}, nil
}

// ownerPrefix is the prefix of all of owner's keys.
func (s *Store) ownerPrefix(owner string) string { return ownerPrefix(s.prefix, owner) }

// ownerPrefix is the prefix of all of owner's keys under prefix, Store's
// and Responses' alike. The owner is the hash tag (one Cluster slot per
// owner); an owner that is not a plain token (Owner's hashes are) is
// hashed, so no owner string can reach into another owner's keys.
func ownerPrefix(prefix, owner string) string {
	tag := owner
	if !plainToken(owner) {
		sum := sha256.Sum256([]byte(owner))
		tag = "h_" + hex.EncodeToString(sum[:16])
	}
	return prefix + "{" + tag + "}:"
}

func plainToken(s string) bool {
	if s == "" || len(s) > 100 || strings.HasPrefix(s, "h_") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// member is an index entry: created_at, fixed-width so that lexical order
// is numeric order, then the id.
func member(createdAt int64, id string) string { return padded(createdAt) + ":" + id }

func padded(createdAt int64) string { return fmt.Sprintf("%020d", createdAt) }

func ms(d time.Duration) int64 { return d.Milliseconds() }

// run runs a script for owner at now and returns its status and details.
func (s *Store) run(ctx context.Context, sc *goredis.Script, owner string, now time.Time, args ...any) ([]string, error) {
	kp := s.ownerPrefix(owner)
	all := append([]any{kp, now.UnixMilli(), fmt.Sprintf("%d:%d", ms(s.limits.ExpiredMemory), ms(s.limits.ExpiredKeep))}, args...)
	// The one declared key routes the call to the owner's slot.
	res, err := sc.Run(ctx, s.rdb, []string{kp + "live"}, all...).StringSlice()
	if err != nil {
		return nil, s.wrap(ctx, err)
	}
	if len(res) == 0 {
		return nil, errors.New("store/redis: empty script reply")
	}
	if res[0] == "quota" && len(res) == 3 {
		max, _ := strconv.ParseInt(res[2], 10, 64)
		return res, &store.QuotaError{Limit: res[1], Max: max}
	}
	return res, nil
}

// wrap turns Redis' out-of-memory refusal into a QuotaError (the store is
// full: a client error to report, not a server fault) that still says what
// Redis said, an error that is no answer of Redis (it could not be
// reached, or did not answer in time) into store.ErrUnavailable, and wraps
// anything else.
func (s *Store) wrap(ctx context.Context, err error) error { return wrap(ctx, s.rdb, err) }

// wrap is Store.wrap over rdb (Responses' too).
func wrap(ctx context.Context, rdb goredis.UniversalClient, err error) error {
	var re goredis.Error
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ") {
		q := &store.QuotaError{Limit: store.LimitStoreMemory, Max: maxMemory(ctx, rdb)}
		return fmt.Errorf("%w (redis: %v)", q, err)
	}
	if err != nil && !errors.As(err, &re) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("store/redis: %w: %w", store.ErrUnavailable, err)
	}
	return fmt.Errorf("store/redis: %w", err)
}

// maxMemory is Redis' maxmemory, best effort (managed Redis may forbid
// CONFIG): 0 when unknown.
func maxMemory(ctx context.Context, rdb goredis.UniversalClient) int64 {
	v, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(v["maxmemory"], 10, 64)
	return n
}

func status(res []string, what string) error {
	switch res[0] {
	case "ok":
		return nil
	case "notfound":
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	case "expired":
		return fmt.Errorf("%s: %w", what, store.ErrExpired)
	case "taken":
		return fmt.Errorf("store/redis: %s: the id is taken", what)
	}
	return fmt.Errorf("store/redis: %s: unexpected script reply %q", what, res[0])
}

// PutContainer implements store.Store.
func (s *Store) PutContainer(ctx context.Context, c store.Container) error {
	now := s.now()
	c, err := storeutil.CheckContainer(c, now)
	if err != nil {
		return err
	}
	meta, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store/redis: %w", err)
	}
	res, err := s.run(ctx, s.scripts.putContainer, c.Owner, now,
		c.ID, meta, member(c.CreatedAt, c.ID), c.LastActiveAt, c.ExpiresAfterMinutes, s.limits.OwnerContainers)
	if err != nil {
		return err
	}
	return status(res, "container "+c.ID)
}

// decodeContainer reads a container hash's meta and la fields.
func decodeContainer(meta, la any) (store.Container, bool, error) {
	ms, ok := meta.(string)
	if !ok {
		return store.Container{}, false, nil
	}
	var c store.Container
	if err := json.Unmarshal([]byte(ms), &c); err != nil {
		return c, false, fmt.Errorf("store/redis: container record: %w", err)
	}
	if las, ok := la.(string); ok {
		if n, err := strconv.ParseInt(las, 10, 64); err == nil {
			c.LastActiveAt = n // touches update only this field
		}
	}
	return c, true, nil
}

// GetContainer implements store.Store.
func (s *Store) GetContainer(ctx context.Context, owner, id string) (store.Container, error) {
	if !store.ValidID(id) {
		return store.Container{}, fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	v, err := s.rdb.HMGet(ctx, s.ownerPrefix(owner)+"c:"+id, "meta", "la").Result()
	if err != nil {
		return store.Container{}, s.wrap(ctx, err)
	}
	return s.container(v[0], v[1], id)
}

// container decodes a container record and applies ExpiredMemory.
func (s *Store) container(meta, la any, id string) (store.Container, error) {
	c, ok, err := decodeContainer(meta, la)
	if err != nil {
		return store.Container{}, err
	}
	if !ok || storeutil.Forgotten(c, s.limits, s.now()) {
		return store.Container{}, fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	return c, nil
}

// TouchContainer implements store.Store.
func (s *Store) TouchContainer(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	return s.touch(ctx, owner, id, now, false)
}

// ReviveContainer implements store.Store.
func (s *Store) ReviveContainer(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	return s.touch(ctx, owner, id, now, true)
}

// touch sets the container's last use to now; revive lets it bring an
// expired container whose files are kept back.
func (s *Store) touch(ctx context.Context, owner, id string, now time.Time, revive bool) (store.Container, error) {
	if !store.ValidID(id) {
		return store.Container{}, fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	if now.IsZero() {
		now = s.now()
	}
	flag := "0"
	if revive {
		flag = "1"
	}
	res, err := s.run(ctx, s.scripts.touch, owner, now, id, now.Unix(), s.limits.OwnerContainers, flag)
	if err != nil {
		return store.Container{}, err
	}
	if err := status(res, "container "+id); err != nil {
		return store.Container{}, err
	}
	c, _, err := decodeContainer(res[1], nil)
	c.LastActiveAt = now.Unix()
	return c, err
}

// DeleteContainer implements store.Store.
func (s *Store) DeleteContainer(ctx context.Context, owner, id string) error {
	if !store.ValidID(id) {
		return fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	res, err := s.run(ctx, s.scripts.deleteContainer, owner, s.now(), id)
	if err != nil {
		return err
	}
	return status(res, "container "+id)
}

// ListContainers implements store.Store.
func (s *Store) ListContainers(ctx context.Context, owner string, o store.ListOptions) ([]store.Container, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	kp := s.ownerPrefix(owner)
	after := ""
	if o.After != "" {
		if !store.ValidID(o.After) {
			return nil, false, nil
		}
		m, err := s.rdb.HGet(ctx, kp+"c:"+o.After, "m").Result()
		if errors.Is(err, goredis.Nil) {
			return nil, false, nil // unknown after: an empty page
		}
		if err != nil {
			return nil, false, s.wrap(ctx, err)
		}
		after = m
	}
	now := s.now()
	var page []store.Container
	more, err := s.scan(ctx, kp+"containers", o, after, func(members []string) (int, error) {
		cmds, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, m := range members {
				p.HMGet(ctx, kp+"c:"+idOf(m), "meta", "la")
			}
			return nil
		})
		if err != nil {
			return 0, s.wrap(ctx, err)
		}
		var gone []any
		n := 0
		for i, cmd := range cmds {
			v := cmd.(*goredis.SliceCmd).Val()
			c, ok, err := decodeContainer(v[0], v[1])
			if err != nil {
				return 0, err
			}
			switch {
			case !ok:
				gone = append(gone, members[i]) // its key expired: prune the index
			case c.Expired(now) || (o.Name != "" && c.Name != o.Name):
			default:
				if len(page) <= o.Limit {
					page = append(page, c)
				}
				n++
			}
		}
		if len(gone) > 0 {
			if err := s.rdb.ZRem(ctx, kp+"containers", gone...).Err(); err != nil {
				return 0, s.wrap(ctx, err)
			}
		}
		return n, nil
	})
	if err != nil {
		return nil, false, err
	}
	page, more = onePage(page, more, o.Limit)
	return page, more, nil
}

func idOf(member string) string {
	_, id, _ := strings.Cut(member, ":")
	return id
}

// scan walks the index zset key in o.Order from after (a member, "" for
// the start), handing chunks of members to take, which returns how many
// of them it kept, until o.Limit+1 are kept (then more is true) or the
// index ends. The cursor is the last member seen, never an offset, so
// writes between chunks neither skip nor repeat items.
func (s *Store) scan(ctx context.Context, key string, o store.ListOptions, after string, take func([]string) (int, error)) (bool, error) {
	chunk := int64(o.Limit + 1)
	kept := 0
	for {
		z := goredis.ZRangeArgs{Key: key, ByLex: true, Count: chunk}
		switch {
		case o.Order == "asc":
			z.Start, z.Stop = "-", "+"
			if after != "" {
				z.Start = "(" + after
			}
		default:
			z.Start, z.Stop, z.Rev = "+", "-", true
			if after != "" {
				z.Start = "(" + after
			}
		}
		members, err := s.rdb.ZRangeArgs(ctx, z).Result()
		if err != nil {
			return false, s.wrap(ctx, err)
		}
		if len(members) == 0 {
			return false, nil
		}
		n, err := take(members)
		if err != nil {
			return false, err
		}
		kept += n
		if kept > o.Limit {
			return true, nil
		}
		if int64(len(members)) < chunk {
			return false, nil
		}
		after = members[len(members)-1]
	}
}

// onePage cuts a scan's page (which may hold one item past limit) to
// limit, and says whether more follow.
func onePage[T any](page []T, more bool, limit int) ([]T, bool) {
	if more || len(page) > limit {
		return page[:min(len(page), limit)], true
	}
	return page, false
}

// OwnerBytes implements store.OwnerBytes.
func (s *Store) OwnerBytes(ctx context.Context, owner string) (int64, error) {
	res, err := s.run(ctx, s.scripts.ownerBytes, owner, s.now())
	if err != nil {
		return 0, err
	}
	if len(res) < 2 {
		return 0, errors.New("store/redis: owner bytes: short reply")
	}
	return strconv.ParseInt(res[1], 10, 64)
}
