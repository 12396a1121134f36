package grpcconn

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// event is one hook call.
type event struct {
	Kind   string // "opened", "closed", "finished"
	Conn   Conn
	Method string
	Code   codes.Code
}

// recorder returns a Handler sending every hook call to events.
func recorder(events chan<- event) *Handler {
	return &Handler{
		Opened: func(c Conn) { events <- event{Kind: "opened", Conn: c} },
		Closed: func(c Conn) { events <- event{Kind: "closed", Conn: c} },
		Finished: func(c Conn, m string, code codes.Code) {
			events <- event{Kind: "finished", Conn: c, Method: m, Code: code}
		},
	}
}

// next waits up to 10 s for the next event.
func next(t *testing.T, side string, events <-chan event) event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no event within 10s", side)
		return event{}
	}
}

var addrPortEqual = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })

// TestHandler runs a real grpc-go server and client, each with a Handler,
// and checks what each side reports for one connection and two calls.
func TestHandler(t *testing.T) {
	srvEvents, cliEvents := make(chan event, 16), make(chan event, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(recorder(srvEvents)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(recorder(cliEvents)))
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(nope) = %v, want NotFound", err)
	}
	cc.Close()

	const check = "/grpc.health.v1.Health/Check"
	cliOpen := next(t, "client", cliEvents)
	server := netip.MustParseAddrPort(ln.Addr().String())
	conn := Conn{Local: cliOpen.Conn.Local, Remote: server} // as the client sees it
	if !cliOpen.Conn.Local.Addr().IsLoopback() {
		t.Errorf("client Local = %v, want a loopback address", cliOpen.Conn.Local)
	}
	tests := []struct {
		name   string
		events <-chan event
		first  event
		want   []event
	}{{
		name:   "server",
		events: srvEvents,
		want: []event{
			{Kind: "opened", Conn: Conn{Local: server, Remote: conn.Local}},
			{Kind: "finished", Conn: Conn{Local: server, Remote: conn.Local}, Method: check, Code: codes.OK},
			{Kind: "finished", Conn: Conn{Local: server, Remote: conn.Local}, Method: check, Code: codes.NotFound},
			{Kind: "closed", Conn: Conn{Local: server, Remote: conn.Local}},
		},
	}, {
		name:   "client",
		events: cliEvents,
		first:  cliOpen,
		want: []event{
			{Kind: "opened", Conn: conn},
			{Kind: "finished", Method: check, Code: codes.OK},
			{Kind: "finished", Method: check, Code: codes.NotFound},
			{Kind: "closed", Conn: conn},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []event
			if tt.first.Kind != "" {
				got = append(got, tt.first)
			}
			for len(got) < len(tt.want) {
				got = append(got, next(t, tt.name, tt.events))
			}
			// A server may report a call's end after its connection's
			// (handlers are not waited for), and calls end in any order.
			byKind := cmpopts.SortSlices(func(a, b event) bool { return a.Kind+a.Code.String() < b.Kind+b.Code.String() })
			if diff := cmp.Diff(tt.want, got, addrPortEqual, byKind); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestZeroHandler: a Handler without hooks takes every event.
func TestZeroHandler(t *testing.T) {
	var h Handler
	ctx := h.TagConn(context.Background(), &stats.ConnTagInfo{})
	h.HandleConn(ctx, &stats.ConnBegin{})
	rctx := h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: "/x.Y/Z"})
	if rctx != ctx {
		t.Error("TagRPC without Finished added to the context")
	}
	h.HandleRPC(rctx, &stats.End{})
	h.HandleConn(ctx, &stats.ConnEnd{})
}
