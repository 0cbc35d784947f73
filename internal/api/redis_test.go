package api_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// Two API servers ("replicas") over one real redis-server: what one
// creates the other serves, to the same credential only.
func TestRedisReplicas(t *testing.T) {
	url := redistest.Start(t)
	ck := &clock{t: time.Now()}
	open := func() store.Store {
		st, err := redis.New(context.Background(), url, store.DefaultLimits(), ck.Now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	a := newEnvStore(t, open(), ck, nil).client("sk-a")
	b := newEnvStore(t, open(), ck, nil).client("sk-a")

	f, err := a.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(csvData), "report.csv", "text/csv"), Purpose: "user_data"})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := b.Containers.New(ctx, openai.ContainerNewParams{Name: "shared", FileIDs: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := a.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("hello"), "hello.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	list, err := b.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
	if err != nil || len(list.Data) != 2 {
		t.Fatalf("list on the other replica: %v %s", err, list.RawJSON())
	}
	resp, err := b.Containers.Files.Content.Get(ctx, cn.ID, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != "hello" {
		t.Fatalf("content %q", data)
	}
	var ids []string
	it := a.Containers.Files.ListAutoPaging(ctx, cn.ID, openai.ContainerFileListParams{Limit: openai.Int(1)})
	for it.Next() {
		ids = append(ids, it.Current().ID)
	}
	if it.Err() != nil || len(ids) != 2 {
		t.Fatalf("auto-pager: %v %v", it.Err(), ids)
	}
	other := newEnvStore(t, open(), ck, nil).client("sk-b")
	if _, err := other.Containers.Get(ctx, cn.ID); sdkStatus(err) != 404 {
		t.Fatalf("another credential: %v", err)
	}
	if _, err := other.Files.Get(ctx, f.ID); sdkStatus(err) != 404 {
		t.Fatalf("another credential's file: %v", err)
	}
	if err := a.Containers.Delete(ctx, cn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Containers.Get(ctx, cn.ID); sdkStatus(err) != 404 {
		t.Fatalf("deleted on one replica, still on the other: %v", err)
	}
}
