package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Skills is the Redis store.Skills, for several replicas: a skill one
// replica stored is served and mounted by every other. Keys sit under the
// owner's prefix, P{owner}: (one Cluster slot per owner, as Store's):
//
//	sk:<id>        string  the skill and its versions' metadata (storeutil.SkillRecord, JSON)
//	skz:<id>:<n>   string  version n's zip
//	skidx          zset    member(created_at, id) of the skills that belong to no container (ListSkills)
//	skall          set     every skill id of the owner (SkillLimits.Skills)
//	skbytes        string  the owner's zips' bytes (SkillLimits.OwnerBytes)
//
// No key has a TTL: skills live until deleted, as OpenAI's do. Every
// write is one optimistic transaction (WATCH the skill and the owner's
// counters, MULTI, EXEC, retried when another writer came between), so a
// write is all or nothing and two replicas cannot both pass a bound. A
// full Redis refuses a write as a whole (a *store.QuotaError for
// store.LimitStoreMemory); deletes still run then.
type Skills struct {
	conn
	limits store.SkillLimits
}

var _ store.Skills = (*Skills)(nil)

// skillRetries bounds a write's optimistic retries.
const skillRetries = 16

// NewSkills connects to the Redis at url (as New does).
func NewSkills(ctx context.Context, url string, l store.SkillLimits, now func() time.Time, opts ...Option) (*Skills, error) {
	return dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Skills, error) {
		return NewSkillsClient(ctx, rdb, l, now, opts...)
	})
}

// NewSkillsClient is NewSkills over a client the caller made (and closes).
func NewSkillsClient(ctx context.Context, rdb goredis.UniversalClient, l store.SkillLimits, now func() time.Time, opts ...Option) (*Skills, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	return &Skills{conn: c, limits: l}, nil
}

func (s *Skills) keys(owner, id string) (kp, rec string) {
	kp = ownerPrefix(s.prefix, owner)
	return kp, kp + "sk:" + id
}

func zipKey(kp, id string, n int) string { return kp + "skz:" + id + ":" + strconv.Itoa(n) }

// read returns the skill's record through g (the client or a WATCHing tx).
func (s *Skills) read(ctx context.Context, g goredis.Cmdable, key string) (storeutil.SkillRecord, error) {
	var rec storeutil.SkillRecord
	b, err := g.Get(ctx, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return rec, store.ErrNotFound
	}
	if err != nil {
		return rec, wrap(ctx, s.rdb, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("store/redis: skill record: %w", err)
	}
	return rec, nil
}

// update runs fn in an optimistic transaction watching keys; fn reads
// through tx and queues its writes on the pipeline it returns through
// write.
func (s *Skills) update(ctx context.Context, fn func(tx *goredis.Tx) (func(p goredis.Pipeliner), error), keys ...string) error {
	for range skillRetries {
		err := s.rdb.Watch(ctx, func(tx *goredis.Tx) error {
			write, err := fn(tx)
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				write(p)
				return nil
			})
			return err
		}, keys...)
		if errors.Is(err, goredis.TxFailedErr) {
			continue
		}
		var qe *store.QuotaError
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNoVersion) ||
			errors.Is(err, store.ErrDefaultVersion) || errors.Is(err, store.ErrExists) || errors.As(err, &qe) {
			return err
		}
		return wrap(ctx, s.rdb, err)
	}
	return fmt.Errorf("store/redis: %w: skill write kept conflicting", store.ErrUnavailable)
}

func (s *Skills) ownerBytes(ctx context.Context, tx *goredis.Tx, kp string) (int64, error) {
	n, err := tx.Get(ctx, kp+"skbytes").Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	return n, err
}

func (s *Skills) CreateSkill(ctx context.Context, sk store.Skill, v store.SkillVersion, zip []byte) (store.Skill, store.SkillVersion, error) {
	rec, v, err := storeutil.NewSkill(sk, v, int64(len(zip)), s.now().Unix())
	if err != nil {
		return sk, v, err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return sk, v, err
	}
	kp, key := s.keys(sk.Owner, sk.ID)
	err = s.update(ctx, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		if n, err := tx.Exists(ctx, key).Result(); err != nil {
			return nil, err
		} else if n > 0 {
			return nil, store.ErrExists
		}
		count, err := tx.SCard(ctx, kp+"skall").Result()
		if err != nil {
			return nil, err
		}
		if s.limits.Skills > 0 && count >= int64(s.limits.Skills) {
			return nil, &store.QuotaError{Limit: "owner_skills", Max: int64(s.limits.Skills)}
		}
		used, err := s.ownerBytes(ctx, tx, kp)
		if err != nil {
			return nil, err
		}
		if s.limits.OwnerBytes > 0 && used+int64(len(zip)) > s.limits.OwnerBytes {
			return nil, &store.QuotaError{Limit: "owner_skill_bytes", Max: s.limits.OwnerBytes}
		}
		return func(p goredis.Pipeliner) {
			p.Set(ctx, key, b, 0)
			p.Set(ctx, zipKey(kp, sk.ID, 1), zip, 0)
			p.SAdd(ctx, kp+"skall", sk.ID)
			if sk.Container == "" {
				p.ZAdd(ctx, kp+"skidx", goredis.Z{Member: member(sk.CreatedAt, sk.ID)})
			}
			p.IncrBy(ctx, kp+"skbytes", int64(len(zip)))
		}, nil
	}, key, kp+"skall", kp+"skbytes")
	return rec.Skill, v, err
}

func (s *Skills) GetSkill(ctx context.Context, owner, id string) (store.Skill, error) {
	if !store.ValidID(id) {
		return store.Skill{}, store.ErrNotFound
	}
	_, key := s.keys(owner, id)
	rec, err := s.read(ctx, s.rdb, key)
	return rec.Skill, err
}

func (s *Skills) ListSkills(ctx context.Context, owner string, o store.ListOptions) ([]store.Skill, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	kp := ownerPrefix(s.prefix, owner)
	// The owner's skills are bounded (SkillLimits.Skills): read them all
	// and page them as the in-process store does.
	members, err := s.rdb.ZRange(ctx, kp+"skidx", 0, -1).Result()
	if err != nil {
		return nil, false, wrap(ctx, s.rdb, err)
	}
	if len(members) == 0 {
		return nil, false, nil
	}
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = kp + "sk:" + idOf(m)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, false, wrap(ctx, s.rdb, err)
	}
	var all []store.Skill
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // deleted meanwhile
		}
		var rec storeutil.SkillRecord
		if err := json.Unmarshal([]byte(str), &rec); err != nil {
			return nil, false, fmt.Errorf("store/redis: skill record: %w", err)
		}
		all = append(all, rec.Skill)
	}
	page, more := storeutil.Page(all, storeutil.SkillLess, func(k store.Skill) string { return k.ID }, o)
	return page, more, nil
}

// change applies fn to the skill's record in a transaction; extra queues
// further writes.
func (s *Skills) change(ctx context.Context, owner, id string, fn func(kp string, rec *storeutil.SkillRecord, tx *goredis.Tx) (func(goredis.Pipeliner), error)) (storeutil.SkillRecord, error) {
	var out storeutil.SkillRecord
	if !store.ValidID(id) {
		return out, store.ErrNotFound
	}
	kp, key := s.keys(owner, id)
	err := s.update(ctx, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		rec, err := s.read(ctx, tx, key)
		if err != nil {
			return nil, err
		}
		extra, err := fn(kp, &rec, tx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		out = rec
		return func(p goredis.Pipeliner) {
			p.Set(ctx, key, b, 0)
			if extra != nil {
				extra(p)
			}
		}, nil
	}, key, kp+"skbytes")
	return out, err
}

func (s *Skills) SetDefaultVersion(ctx context.Context, owner, id string, version int) (store.Skill, error) {
	rec, err := s.change(ctx, owner, id, func(_ string, rec *storeutil.SkillRecord, _ *goredis.Tx) (func(goredis.Pipeliner), error) {
		return nil, rec.SetDefault(version)
	})
	return rec.Skill, err
}

func (s *Skills) AddVersion(ctx context.Context, owner, id string, v store.SkillVersion, zip []byte, makeDefault bool) (store.SkillVersion, store.Skill, error) {
	if v.CreatedAt == 0 {
		v.CreatedAt = s.now().Unix()
	}
	var added store.SkillVersion
	rec, err := s.change(ctx, owner, id, func(kp string, rec *storeutil.SkillRecord, tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		used, err := s.ownerBytes(ctx, tx, kp)
		if err != nil {
			return nil, err
		}
		if s.limits.OwnerBytes > 0 && used+int64(len(zip)) > s.limits.OwnerBytes {
			return nil, &store.QuotaError{Limit: "owner_skill_bytes", Max: s.limits.OwnerBytes}
		}
		added, err = rec.AddVersion(v, int64(len(zip)), makeDefault, s.limits)
		if err != nil {
			return nil, err
		}
		return func(p goredis.Pipeliner) {
			p.Set(ctx, zipKey(kp, id, added.Version), zip, 0)
			p.IncrBy(ctx, kp+"skbytes", int64(len(zip)))
		}, nil
	})
	return added, rec.Skill, err
}

func (s *Skills) GetVersion(ctx context.Context, owner, id string, version int) (store.SkillVersion, error) {
	if !store.ValidID(id) {
		return store.SkillVersion{}, store.ErrNotFound
	}
	_, key := s.keys(owner, id)
	rec, err := s.read(ctx, s.rdb, key)
	if err != nil {
		return store.SkillVersion{}, err
	}
	return rec.Version(version)
}

func (s *Skills) ListVersions(ctx context.Context, owner, id string, o store.ListOptions) ([]store.SkillVersion, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	if !store.ValidID(id) {
		return nil, false, store.ErrNotFound
	}
	_, key := s.keys(owner, id)
	rec, err := s.read(ctx, s.rdb, key)
	if err != nil {
		return nil, false, err
	}
	page, more := storeutil.Page(rec.Versions, storeutil.VersionLess, func(v store.SkillVersion) string { return v.ID }, o)
	return page, more, nil
}

func (s *Skills) DeleteVersion(ctx context.Context, owner, id string, version int) error {
	_, err := s.change(ctx, owner, id, func(kp string, rec *storeutil.SkillRecord, _ *goredis.Tx) (func(goredis.Pipeliner), error) {
		v, err := rec.DeleteVersion(version)
		if err != nil {
			return nil, err
		}
		return func(p goredis.Pipeliner) {
			p.Del(ctx, zipKey(kp, id, version))
			p.DecrBy(ctx, kp+"skbytes", v.Bytes)
		}, nil
	})
	return err
}

func (s *Skills) DeleteSkill(ctx context.Context, owner, id string) error {
	if !store.ValidID(id) {
		return store.ErrNotFound
	}
	kp, key := s.keys(owner, id)
	return s.update(ctx, func(tx *goredis.Tx) (func(goredis.Pipeliner), error) {
		rec, err := s.read(ctx, tx, key)
		if err != nil {
			return nil, err
		}
		return func(p goredis.Pipeliner) {
			p.Del(ctx, key)
			for _, v := range rec.Versions {
				p.Del(ctx, zipKey(kp, id, v.Version))
			}
			p.SRem(ctx, kp+"skall", id)
			p.ZRem(ctx, kp+"skidx", member(rec.Skill.CreatedAt, id))
			p.DecrBy(ctx, kp+"skbytes", rec.Bytes())
		}, nil
	}, key, kp+"skbytes")
}

func (s *Skills) VersionContent(ctx context.Context, owner, id string, version int) ([]byte, error) {
	if _, err := s.GetVersion(ctx, owner, id, version); err != nil {
		return nil, err
	}
	kp, _ := s.keys(owner, id)
	b, err := s.rdb.Get(ctx, zipKey(kp, id, version)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, store.ErrNoVersion // deleted between the two reads
	}
	if err != nil {
		return nil, wrap(ctx, s.rdb, err)
	}
	return b, nil
}
