package cluster

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// oneLease is a lease store holding one lease, whoever asks.
type oneLease struct{ l Lease }

func (o *oneLease) Take(context.Context, string, Lease, uint64, time.Duration) (Lease, error) {
	return o.l, nil
}
func (o *oneLease) Renew(context.Context, string, string, uint64, time.Duration) (Lease, bool, error) {
	return o.l, true, nil
}
func (o *oneLease) Get(context.Context, string) (Lease, bool, error) { return o.l, true, nil }
func (o *oneLease) Release(context.Context, string, string, uint64) error {
	return nil
}

// TestCompressedRequestsRefused: grpc/encoding/gzip is linked into the
// binary (a dependency registers it), so the server would decompress a
// gzip request up to MaxMessageBytes; it refuses compressed requests
// before reading their message, even from a peer with the key.
func TestCompressedRequestsRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leases := &oneLease{}
	var ran atomic.Int32
	mk := func(addr string) *Node {
		n, err := NewNode(Config{Addr: addr, Secret: "a-secret-every-replica-shares", Leases: leases,
			Handler: func(_ context.Context, _ string, _ uint64, p []byte, _ func([]byte)) ([]byte, error) {
				ran.Add(1)
				return p, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := mk(lis.Addr().String()), mk("127.0.0.1:1")
	leases.l = Lease{Holder: a.ID(), Addr: a.Addr(), Token: 7}
	srv := a.NewServer()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); _ = b.Close() })

	if out, err := b.Forward(context.Background(), "k", leases.l, []byte("plain"), nil); err != nil || string(out) != "plain" {
		t.Fatalf("an uncompressed run: %q %v", out, err)
	}
	conn, _, err := b.conn(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), mdKey, "k", mdHolder, a.ID(), mdToken, strconv.Itoa(7))
	err = conn.Invoke(ctx, runMethod, wrapperspb.Bytes(make([]byte, 1<<20)), new(wrapperspb.BytesValue), grpc.UseCompressor(gzip.Name))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a gzip request: %v, want Unimplemented", err)
	}
	if ran.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once (the uncompressed run)", ran.Load())
	}
}

// TestForwardProgress: a run forwarded with a progress func goes by
// RunStream — the holder's pieces arrive in order, then the answer; the
// same run without one is unary; a holder of a build before RunStream
// (the service without it) runs the run once, unary, and its answer
// arrives without pieces.
func TestForwardProgress(t *testing.T) {
	leases := &oneLease{}
	var ran atomic.Int32
	mk := func(addr string) *Node {
		n, err := NewNode(Config{Addr: addr, Secret: "a-secret-every-replica-shares", Leases: leases,
			Handler: func(_ context.Context, _ string, _ uint64, p []byte, progress func([]byte)) ([]byte, error) {
				ran.Add(1)
				if progress != nil {
					for _, piece := range []string{"one", "", "two"} {
						progress([]byte(piece))
					}
				}
				return append([]byte("ran "), p...), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// serve starts a holder whose service is desc.
	serve := func(desc *grpc.ServiceDesc) *Node {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n := mk(lis.Addr().String())
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(n.key.serverTLS(func(error) {}))))
		srv.RegisterService(desc, n)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return n
	}
	old := serviceDesc
	old.Streams = nil
	for _, tc := range []struct {
		name     string
		desc     *grpc.ServiceDesc
		progress bool
		want     []string
	}{
		{"stream", &serviceDesc, true, []string{"one", "", "two"}},
		{"unary", &serviceDesc, false, nil},
		{"a holder before RunStream", &old, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := serve(tc.desc), mk("127.0.0.1:1")
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			leases.l = Lease{Holder: a.ID(), Addr: a.Addr(), Token: 7}
			ran.Store(0)
			var got []string
			var progress func([]byte)
			if tc.progress {
				progress = func(p []byte) { got = append(got, string(p)) }
			}
			out, err := b.Forward(context.Background(), "k", leases.l, []byte("x"), progress)
			if err != nil || string(out) != "ran x" || ran.Load() != 1 || !slices.Equal(got, tc.want) {
				t.Fatalf("Forward: %q %v, ran %d times, pieces %q; want \"ran x\", once, %q", out, err, ran.Load(), got, tc.want)
			}
		})
	}
}
