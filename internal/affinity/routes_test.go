package affinity

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
)

// notForwarded are the procedures that write one user's entries
// (changesAUser) and are not forwarded to the user's owner, each with the
// reason; none today. (SetAccountStatus, one conditional write of the
// account that does not queue, carries no request_id: it is no such
// procedure.)
var notForwarded = map[string]string{}

// procedures are the procedures of every service of package
// pointledger.v1 (every file of it, those added since included), sorted.
func procedures(tb testing.TB) map[string]protoreflect.MethodDescriptor {
	tb.Helper()
	_ = pb.File_pointledger_v1_ledger_proto // the package's files are registered by gen
	out := map[string]protoreflect.MethodDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("pointledger.v1", func(file protoreflect.FileDescriptor) bool {
		for i := range file.Services().Len() {
			svc := file.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				out["/"+string(svc.FullName())+"/"+string(m.Name())] = m
			}
		}
		return true
	})
	if len(out) == 0 {
		tb.Fatal("no procedure of package pointledger.v1 is registered")
	}
	return out
}

// changesAUser says whether m writes one user's entries, as the write
// path's queue does: its request names a user_id and carries a
// request_id (every mutation of the ledger does, for its idempotency),
// and m is not marked as reading only.
func changesAUser(m protoreflect.MethodDescriptor) bool {
	opts, _ := m.Options().(*descriptorpb.MethodOptions)
	fields := m.Input().Fields()
	return fields.ByName("user_id") != nil && fields.ByName("request_id") != nil &&
		opts.GetIdempotencyLevel() != descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}

// What is forwarded (routes, forward.go) is what the peer role may call
// (policy.go's peer column), for every procedure of every service; each
// names its user, by which its owner is found, and is unary; and every
// procedure that changes one user's ledger is forwarded, or listed in
// notForwarded with its reason. A new RPC fails here until both files
// say the same of it.
func TestRoutesAreWhatPeersMayCall(t *testing.T) {
	t.Parallel()
	all := procedures(t)
	for _, procedure := range slices.Sorted(func(yield func(string) bool) {
		for p := range all {
			if !yield(p) {
				return
			}
		}
	}) {
		m := all[procedure]
		_, routed := routes[procedure]
		peer := auth.PeerMayCall(procedure)
		switch {
		case routed && !peer:
			t.Errorf("%s is forwarded to its user's owner (routes in internal/affinity/forward.go), but the peer role may not call it "+
				"(no peer: true in internal/auth/policy.go): the owner would refuse every forwarded call", procedure)
		case peer && !routed:
			t.Errorf("the peer role may call %s (peer: true in internal/auth/policy.go), but it is not forwarded "+
				"(no route in internal/affinity/forward.go): add its route, or take peer: true away", procedure)
		case !routed && changesAUser(m) && notForwarded[procedure] == "":
			t.Errorf("%s writes one user's entries (its request has user_id and request_id, and it has no idempotency_level = NO_SIDE_EFFECTS), "+
				"and is not forwarded to the user's owner: add it to routes in internal/affinity/forward.go and give it peer: true "+
				"in internal/auth/policy.go; or, if it only reads, mark it NO_SIDE_EFFECTS in its .proto; or, if it does not go "+
				"through the user's queue of the write path, list it in notForwarded here with the reason", procedure)
		}
		if routed && (m.IsStreamingClient() || m.IsStreamingServer() || m.Input().Fields().ByName("user_id") == nil) {
			t.Errorf("%s is forwarded, but is streamed or names no user_id", procedure)
		}
		if routed {
			checkRouteTakes(t, procedure, m)
		}
	}
	for procedure := range notForwarded {
		if m, ok := all[procedure]; !ok || !changesAUser(m) {
			t.Errorf("notForwarded lists %s, which is no procedure that writes a user's entries: take it out", procedure)
		}
	}
}

// checkRouteTakes fails the test unless procedure's route takes its
// request message (routes pair each procedure with its types by hand).
func checkRouteTakes(t *testing.T, procedure string, m protoreflect.MethodDescriptor) {
	t.Helper()
	typ, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	call := routes[procedure](refuseAll{}, "http://peer.invalid"+procedure)
	_, err = call(context.Background(), typ.New().Interface(), http.Header{})
	if err == nil || strings.Contains(err.Error(), "the request is a") {
		t.Errorf("%s: its route does not take a %s: %v", procedure, m.Input().FullName(), err)
	}
}

// refuseAll is an HTTP client that sends nothing anywhere.
type refuseAll struct{}

func (refuseAll) Do(*http.Request) (*http.Response, error) {
	return nil, errors.New("no network in this test")
}
