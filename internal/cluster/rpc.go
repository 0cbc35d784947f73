package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The forwarding service: a unary method whose request and answer are
// the Handler's bytes (a well-known protobuf wrapper, so no generated
// code), and whose metadata say who asks and for which lease; and its
// server-streaming twin, RunStream, for a run whose caller hears its
// progress: the same request and checks, then messages of one tag byte
// (tagProgress: a piece the Handler reported; tagAnswer: its answer,
// the last message) and the bytes.
const (
	serviceName     = "codeinterp.cluster.v1.Cluster"
	runMethod       = "/" + serviceName + "/Run"
	runStreamMethod = "/" + serviceName + "/RunStream"

	tagAnswer   byte = 0
	tagProgress byte = 1

	mdKey    = "x-codeinterp-lease-key" // the container
	mdHolder = "x-codeinterp-holder"    // the holder the caller expects
	mdToken  = "x-codeinterp-token"     // the lease's token

	// MaxMessageBytes bounds a forwarded run and its answer (its images
	// and output are bounded far below by the sandbox). Only a peer that
	// proved the cluster key gets to send one: before that, nothing but
	// a TLS handshake is read.
	MaxMessageBytes = 256 << 20

	// maxStreams bounds the runs one connection carries at once.
	maxStreams = 64
	// handshakeTimeout bounds a connection's TLS handshake (and gRPC's
	// preface) on the server: a client that does not prove the key in
	// that time is dropped.
	handshakeTimeout = 5 * time.Second
)

// runner is the service's handler type (grpc.ServiceDesc.HandlerType).
type runner interface {
	serveRun(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
	serveRunStream(in *wrapperspb.BytesValue, st grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*runner)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Run",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			// Checked before the message is read (dec reads it).
			if err := uncompressed(ctx); err != nil {
				return nil, err
			}
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(runner).serveRun(ctx, in)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "RunStream",
		ServerStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			if err := uncompressed(st.Context()); err != nil {
				return err
			}
			in := new(wrapperspb.BytesValue)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			return srv.(runner).serveRunStream(in, st)
		},
	}},
	Metadata: "codeinterp/cluster/rpc.go",
}

// uncompressed refuses a compressed request: a compressor registered in
// the process (grpc/encoding/gzip is linked in by a dependency) would
// otherwise let a small message decompress to MaxMessageBytes.
func uncompressed(ctx context.Context) error {
	st, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ RecvCompress() string })
	if !ok {
		return status.Error(codes.Internal, "cluster: cannot tell whether the request is compressed")
	}
	if c := st.RecvCompress(); c != "" && c != encoding.Identity {
		return status.Errorf(codes.Unimplemented, "cluster: compressed requests (%q) are refused", c)
	}
	return nil
}

// NewServer returns a gRPC server with the Node's forwarding service, for
// the replicas' internal listener. It trusts nothing but the cluster key:
// a connection is TLS 1.3 in which the client proved it (a certificate
// for the key derived from the secret), or it is dropped before a byte of
// gRPC is read (within handshakeTimeout).
func (n *Node) NewServer() *grpc.Server {
	creds := credentials.NewTLS(n.key.serverTLS(func(error) { n.metrics.refused() }))
	s := grpc.NewServer(grpc.Creds(creds), grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))
	s.RegisterService(&serviceDesc, n)
	return s
}

func (n *Node) serveRun(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	key, token, err := n.admit(ctx)
	if err != nil {
		return nil, err
	}
	out, err := n.cfg.Handler(ctx, key, token, in.GetValue(), nil)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return wrapperspb.Bytes(out), nil
}

// serveRunStream is serveRun whose Handler's progress reaches the caller
// as it comes, each piece one message, the answer the last.
func (n *Node) serveRunStream(in *wrapperspb.BytesValue, st grpc.ServerStream) error {
	ctx := st.Context()
	key, token, err := n.admit(ctx)
	if err != nil {
		return err
	}
	var mu sync.Mutex // a stream's SendMsg is not for concurrent callers
	send := func(tag byte, b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		return st.SendMsg(wrapperspb.Bytes(append([]byte{tag}, b...)))
	}
	out, err := n.cfg.Handler(ctx, key, token, in.GetValue(), func(piece []byte) {
		// A piece the caller cannot take (it went away) is dropped: the
		// answer's send then fails the same way.
		_ = send(tagProgress, piece)
	})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return send(tagAnswer, out)
}

// admit is the checks of a forwarded run before it starts, whichever the
// method: the lease it names, draining, and that this Node holds exactly
// that lease now.
func (n *Node) admit(ctx context.Context) (key string, token uint64, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	// The caller proved the cluster key in the handshake (NewServer):
	// nothing else reaches here.
	key, holder := get(mdKey), get(mdHolder)
	token, err = strconv.ParseUint(get(mdToken), 10, 64)
	if key == "" || err != nil {
		return "", 0, status.Error(codes.InvalidArgument, "cluster: no lease named")
	}
	n.mu.Lock()
	draining := n.draining
	n.mu.Unlock()
	if draining {
		return "", 0, status.Error(codes.Aborted, "cluster: draining")
	}
	// Fencing: the run is for the lease as the caller saw it; this Node
	// runs it only while the store says it still holds exactly that.
	if holder != n.id {
		return "", 0, refusal(reasonOtherProcess, "cluster: not the holder (another process)")
	}
	ok, err := n.holds(ctx, key, token)
	if err != nil {
		return "", 0, refusal(reasonStore, "cluster: the lease store: "+err.Error())
	}
	if !ok {
		return "", 0, refusal(reasonMoved, "cluster: not the holder of that lease")
	}
	n.metrics.served()
	return key, token, nil
}

// The reasons a holder refuses a forwarded run before it starts, carried
// as a google.rpc.ErrorInfo detail of a FailedPrecondition status: the
// caller's next step differs for each (steal, claim again, retry later).
const (
	errorDomain        = "cluster.codeinterp"
	reasonOtherProcess = "OTHER_PROCESS"     // ErrGone
	reasonMoved        = "NOT_HOLDER"        // ErrMoved
	reasonStore        = "STORE_UNAVAILABLE" // ErrStoreUnavailable
)

func refusal(reason, msg string) error {
	st, err := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain})
	if err != nil {
		return status.Error(codes.FailedPrecondition, msg)
	}
	return st.Err()
}

// refusalReason is the ErrorInfo reason of a refusal, or "".
func refusalReason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// Forward sends a run of l's key to its holder and returns the Handler's
// answer there. Errors, all but the last two saying the run was not
// started: ErrGone (another process answers at l's address),
// ErrUnreachable (the holder could not be reached in time: not proof it is
// gone), ErrMoved (it does not hold l now), ErrStoreUnavailable (it could
// not check its lease), ErrDraining; ErrLost (the connection broke during
// the run: its fate is unknown), or another error. With progress set the
// run goes by RunStream and progress hears the Handler's pieces as the
// holder sends them (a holder without RunStream answers Unimplemented
// before it reads the run, which then goes unary: its pieces are lost,
// its answer is not).
func (n *Node) Forward(ctx context.Context, key string, l Lease, payload []byte, progress func([]byte)) ([]byte, error) {
	if l.Holder == n.id {
		return nil, fmt.Errorf("cluster: forwarding %s to this node itself", key)
	}
	conn, p, err := n.conn(l.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	// Reach the holder before the run is sent: a holder that cannot be
	// reached has not started it; once it is sent, a broken connection
	// leaves it unknown (ErrLost).
	if err := n.ready(ctx, conn, p); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if different, warn := p.differentKey(); different {
			// Not proof the holder is gone (it may be a replica
			// configured apart, or someone's listener at a rewritten
			// address): the caller waits for its lease, as for any
			// holder it cannot reach.
			if warn {
				n.cfg.Log.Warn("the replica at this address has a different cluster key: nothing is forwarded to it "+
					"(every replica needs the same cluster.secret, or checkpoints.key)", zap.String("addr", l.Addr))
			}
			return nil, fmt.Errorf("%w: %s has a different cluster key", ErrUnreachable, l.Addr)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, l.Addr, err)
	}
	callCtx, cancel := context.WithCancelCause(metadata.AppendToOutgoingContext(ctx, mdKey, key,
		mdHolder, l.Holder, mdToken, strconv.FormatUint(l.Token, 10)))
	defer cancel(nil)
	watched := make(chan struct{})
	go func() { defer close(watched); n.watchLease(callCtx, key, l, cancel) }()
	start := time.Now()
	var out []byte
	if progress != nil {
		out, err = invokeStream(callCtx, conn, payload, progress)
		if status.Code(err) == codes.Unimplemented && ctx.Err() == nil {
			// A holder of a build before RunStream: it refused the method
			// before reading the run, so the run goes as a unary call
			// (its progress then comes with the answer).
			out, err = invokeUnary(callCtx, conn, payload)
		}
	} else {
		out, err = invokeUnary(callCtx, conn, payload)
	}
	moved := errors.Is(context.Cause(callCtx), errLeaseMoved)
	cancel(nil)
	<-watched
	if moved && ctx.Err() == nil {
		err = fmt.Errorf("%w: the lease %s ran under expired or moved while the holder did not answer", ErrMoved, key)
	} else {
		err = forwardError(ctx, l.Addr, err)
	}
	n.metrics.forwarded(err, time.Since(start))
	if err != nil {
		return nil, err
	}
	return out, nil
}

func invokeUnary(ctx context.Context, conn *grpc.ClientConn, payload []byte) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	err := conn.Invoke(ctx, runMethod, wrapperspb.Bytes(payload), out,
		grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))
	return out.GetValue(), err
}

// invokeStream sends the run by RunStream, passes each progress message
// on as it arrives and returns the answer.
func invokeStream(ctx context.Context, conn *grpc.ClientConn, payload []byte, progress func([]byte)) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on every return
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "RunStream", ServerStreams: true}, runStreamMethod,
		grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(wrapperspb.Bytes(payload)); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	for {
		m := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(m); err != nil {
			if err == io.EOF {
				err = status.Error(codes.Internal, "cluster: the holder ended the run's stream without an answer")
			}
			return nil, err
		}
		b := m.GetValue()
		switch {
		case len(b) > 0 && b[0] == tagProgress:
			progress(b[1:])
		case len(b) > 0 && b[0] == tagAnswer:
			return b[1:], nil
		default:
			return nil, status.Error(codes.Internal, "cluster: the holder sent a message of no known kind")
		}
	}
}

// errLeaseMoved cancels a forwarded call whose lease is no longer in force.
var errLeaseMoved = errors.New("cluster: the lease of the forwarded run is no longer in force")

// watchLease cancels a forwarded call (cancel, with errLeaseMoved) once
// the lease it was sent under is no longer in force, as the store says:
// the holder stopped renewing it (paused, dead, cut off) and it expired,
// or another replica took it. Whatever the holder does with the run then
// is void — it refuses to start it, or reports it failed and drops the
// interpreter it ran in, and writes no checkpoint under that lease — so
// the caller may claim the container and run it itself, instead of
// waiting for a paused holder for as long as the connection lives. A
// store that cannot be asked says nothing: the call goes on.
func (n *Node) watchLease(ctx context.Context, key string, l Lease, cancel context.CancelCauseFunc) {
	n.everyThird(ctx, func() bool {
		cur, ok, err := n.Holder(ctx, key)
		if err == nil && (!ok || cur.Holder != l.Holder || cur.Token != l.Token) {
			cancel(errLeaseMoved)
			return false
		}
		return true
	})
}

// forwardError maps a forwarded call's gRPC error to Forward's.
func forwardError(ctx context.Context, addr string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.FailedPrecondition:
		switch refusalReason(st) {
		case reasonOtherProcess:
			return fmt.Errorf("%w: %v", ErrGone, st.Message())
		case reasonStore:
			return fmt.Errorf("%w: %v", ErrStoreUnavailable, st.Message())
		}
		// NOT_HOLDER, or a replica of a build without reasons: claim
		// again (never steal on a reason not understood).
		return fmt.Errorf("%w: %v", ErrMoved, st.Message())
	case codes.Aborted:
		return ErrDraining
	case codes.Unavailable:
		return fmt.Errorf("%w: %v", ErrLost, err)
	}
	return fmt.Errorf("cluster: forwarding to %s: %w", addr, err)
}

// ready waits until conn is connected, for at most DialTimeout (a peer
// that answered with another key is not waited for).
func (n *Node) ready(ctx context.Context, conn *grpc.ClientConn, p *peer) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.DialTimeout)
	defer cancel()
	conn.Connect()
	retried := false
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return errors.New(s.String())
		case connectivity.TransientFailure:
			if p.isDifferent() {
				return errDifferentKey
			}
			// A failure from before (gRPC's backoff keeps it a while)
			// does not make a live holder gone: one fresh try now.
			if retried {
				return errors.New(s.String())
			}
			retried = true
			conn.ResetConnectBackoff()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// peer is what the handshakes with one address told.
type peer struct {
	mu        sync.Mutex
	different bool // the last handshake met another key
	warned    bool // and that was logged
}

func (p *peer) handshook(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.different = errors.Is(err, errDifferentKey)
	if err == nil {
		p.warned = false
	}
}

// isDifferent reports whether the last handshake met another key.
func (p *peer) isDifferent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.different
}

// differentKey reports whether the last handshake met another key, and
// whether that is yet to be logged (once until a handshake succeeds).
func (p *peer) differentKey() (different, warn bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.different {
		return false, false
	}
	warn = !p.warned
	p.warned = true
	return true, warn
}

// conn returns the connection to addr, made once. It is TLS 1.3 in which
// the server must prove the cluster key before the client sends anything
// but its handshake (and the client proves it in turn): an address
// rewritten in the lease store gets no run, code, output or secret.
func (n *Node) conn(addr string) (*grpc.ClientConn, *peer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.conns[addr]; ok {
		return c, n.peers[addr], nil
	}
	p := &peer{}
	// A holder that stops answering during a forwarded run (paused, or
	// its host gone) is found by its lease (watchLease: the call ends
	// once the lease expires, and the caller takes the container over);
	// keepalive pings, slower than that, find a connection that is dead
	// while the lease is not (ErrLost: the run's fate unknown). A live
	// holder answers pings in the middle of a long run.
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(n.key.clientTLS(p.handshook))),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second, PermitWithoutStream: false}))
	if err != nil {
		return nil, nil, err
	}
	n.conns[addr], n.peers[addr] = c, p
	n.cfg.Log.Debug("connected to a replica", zap.String("addr", addr))
	return c, p, nil
}
