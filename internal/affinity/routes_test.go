package affinity

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
)

// What is forwarded is what the peer role may call, and each of them names
// its user, by which its owner is found.
func TestRoutesAreWhatPeersMayCall(t *testing.T) {
	t.Parallel()
	for _, file := range []protoreflect.FileDescriptor{pb.File_pointledger_v1_ledger_proto, pb.File_pointledger_v1_admin_proto} {
		for i := range file.Services().Len() {
			svc := file.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				procedure := "/" + string(svc.FullName()) + "/" + string(m.Name())
				_, routed := routes[procedure]
				if routed != auth.PeerMayCall(procedure) {
					t.Errorf("%s: forwarded %v, but the peer role may call it: %v", procedure, routed, auth.PeerMayCall(procedure))
				}
				if routed && (m.IsStreamingClient() || m.IsStreamingServer() || m.Input().Fields().ByName("user_id") == nil) {
					t.Errorf("%s is forwarded, but is streamed or names no user_id", procedure)
				}
			}
		}
	}
}
