package affinity_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/prototext"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/auth"
)

// client calls in's LedgerService with token ("" for none) and headers.
func (in *instance) client(token string, header ...string) pointledgerv1connect.LedgerServiceClient {
	return pointledgerv1connect.NewLedgerServiceClient(in.srv.H2C, in.url, connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				if token != "" {
					req.Header().Set("Authorization", "Bearer "+token)
				}
				for i := 0; i+1 < len(header); i += 2 {
					req.Header().Set(header[i], header[i+1])
				}
				return next(ctx, req)
			}
		})))
}

// entries is how many entries in's store holds for user: what it
// committed.
func (in *instance) entries(t *testing.T, user string) int {
	t.Helper()
	es, err := in.srv.Store.EntriesAfter(context.Background(), user, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// describe is all a client sees of an error: code, message and details.
func describe(err error) string {
	ce, ok := err.(*connect.Error) //nolint:errorlint // the client's own error, unwrapped
	if !ok {
		return fmt.Sprint(err)
	}
	s := ce.Code().String() + ": " + ce.Message()
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			s += " [" + d.Type() + ": " + derr.Error() + "]"
			continue
		}
		s += " [" + d.Type() + " " + prototext.Format(v) + "]"
	}
	return s
}

func grant(user, id string) *connect.Request[pb.GrantRequest] {
	return connect.NewRequest(&pb.GrantRequest{UserId: user, Amount: "100", RequestId: id})
}

func purchase(user, id, amount string) *connect.Request[pb.PurchaseRequest] {
	return connect.NewRequest(&pb.PurchaseRequest{UserId: user, Amount: amount, RequestId: id})
}

// A mutation that reaches an instance which does not own its user is
// committed by the owner, whose answer, an error too, the caller gets as
// the owner gave it; reads are answered where they land.
func TestForwardToTheOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, creds, user := pair(t, clusterOptions{})
	viaA, toB := a.client(creds.ServiceToken), b.client(creds.ServiceToken)

	res, err := viaA.Grant(ctx, grant(user, "g1"))
	if err != nil || res.Msg.Balance != "100" {
		t.Fatalf("grant through %s: %v, %v", a.url, res, err)
	}
	if a.entries(t, user) != 0 || b.entries(t, user) != 1 {
		t.Errorf("the grant is committed by a: %d entries, b: %d; want it at b, the owner", a.entries(t, user), b.entries(t, user))
	}

	// A refusal, the same through a as from the owner itself, and its
	// replay likewise (replayed: "true" in its ErrorInfo).
	_, forwarded := viaA.Purchase(ctx, purchase(user, "p1", "500"))
	_, direct := toB.Purchase(ctx, purchase(user, "p1", "500"))
	_, again := viaA.Purchase(ctx, purchase(user, "p1", "500"))
	if connect.CodeOf(forwarded) != connect.CodeFailedPrecondition || describe(again) != describe(direct) {
		t.Errorf("a purchase over the balance through a: %s; the owner's replay: %s; its replay through a: %s; want failed_precondition, and the replays the same",
			describe(forwarded), describe(direct), describe(again))
	}
	_, first := toB.Purchase(ctx, purchase(user, "p2", "500"))
	if describe(first) == describe(direct) || connect.CodeOf(first) != connect.CodeFailedPrecondition {
		t.Fatalf("a first refusal %s is like a replayed one %s: the test tells nothing", describe(first), describe(direct))
	}
	if got, want := describe(forwarded), describe(first); got != want {
		t.Errorf("a first refusal through a:\n%s\nfrom the owner:\n%s", got, want)
	}

	// Reads are answered where they land (each instance here has a store
	// of its own; ledgerd's share DynamoDB).
	if res, err := viaA.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user})); err != nil || res.Msg.Version != 0 {
		t.Errorf("a balance read through a, which committed nothing: %v, %v; want version 0, from a's own store", res, err)
	}
	if n, failed, _ := a.seen.counts(); n != 3 || len(failed) != 0 {
		t.Errorf("a forwarded %d calls (failures %v), want 3 (the grant, two purchases)", n, failed)
	}
}

// The caller is checked where it called: a user token for another user is
// refused there, and nothing reaches the owner; its own user it may act
// for, through the owner.
func TestForwardChecksTheCallerFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, creds, user := pair(t, clusterOptions{})
	if _, err := a.client(creds.ServiceToken).Grant(ctx, grant(user, "g1")); err != nil {
		t.Fatal(err)
	}
	token := func(sub string) string {
		tok, err := auth.MintUserToken(creds.Credentials, sub, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	before := b.srv.Snapshot()
	_, err := a.client(token("mallory")).Purchase(ctx, purchase(user, "steal", "100"))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("mallory purchases for %s through a: %v, want permission_denied", user, err)
	}
	if added, changed, removed := before.Diff(b.srv.Snapshot()); len(added)+len(changed)+len(removed) > 0 {
		t.Errorf("a refused call reached the owner: added %v, changed %v, removed %v", added, changed, removed)
	}
	if _, err := a.client(token(user)).Purchase(ctx, purchase(user, "mine", "10")); err != nil {
		t.Errorf("%s purchases for itself through a: %v", user, err)
	}
	if b.entries(t, user) != 2 {
		t.Errorf("the owner has %d entries of %s, want the grant and the user's purchase", b.entries(t, user), user)
	}
	if n, _, _ := a.seen.counts(); n != 2 {
		t.Errorf("a forwarded %d calls, want 2 (the grant, the user's purchase)", n)
	}
}

// A forwarded call is committed where it lands, whoever that instance
// thinks owns the user: one hop at most.
func TestForwardedCallsStay(t *testing.T) {
	t.Parallel()
	a, b, creds, user := pair(t, clusterOptions{}) // b's user, in a's view
	if _, err := a.client(creds.PeerToken, auth.ForwardedHeader, "http://elsewhere:8080").Grant(context.Background(), grant(user, "g1")); err != nil {
		t.Fatal(err)
	}
	if a.entries(t, user) != 1 || b.entries(t, user) != 0 {
		t.Errorf("a forwarded grant for a user of b, sent to a: a has %d entries, b %d; want it at a", a.entries(t, user), b.entries(t, user))
	}
	if n, _, _ := a.seen.counts(); n != 0 {
		t.Errorf("a forwarded %d calls it was forwarded, want 0", n)
	}
}

// Without authentication (-insecure-dev) there is no peer token: the
// header says a call was forwarded, and it stays where it lands.
func TestForwardWithoutAuthentication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _, user := pair(t, clusterOptions{insecure: true})
	if _, err := a.client("").Grant(ctx, grant(user, "g1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client("", auth.ForwardedHeader, "http://elsewhere:8080").Grant(ctx, grant(user, "g2")); err != nil {
		t.Fatal(err)
	}
	if a.entries(t, user) != 1 || b.entries(t, user) != 1 {
		t.Errorf("a has %d entries, b %d; want the grant to a forwarded to b, and the one forwarded to a there", a.entries(t, user), b.entries(t, user))
	}
}

// An owner that is gone, or that does not answer in time, is marked down
// and the mutation committed here; its users stay here until its health
// check passes.
func TestForwardFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		fail   func(b *instance)
		reason string
	}{
		{"gone", func(b *instance) { b.srv.Close() }, affinity.FailUnreachable},
		{"slow", func(b *instance) { b.stall.Store(1) }, affinity.FailTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b, creds, user := pair(t, clusterOptions{timeout: time.Second})
			tc.fail(b)
			viaA := a.client(creds.ServiceToken)
			if _, err := viaA.Grant(ctx, grant(user, "g1")); err != nil {
				t.Fatalf("grant with the owner %s: %v", tc.name, err)
			}
			if _, err := viaA.Purchase(ctx, purchase(user, "p1", "10")); err != nil {
				t.Fatalf("purchase with the owner %s: %v", tc.name, err)
			}
			if a.entries(t, user) != 2 || b.entries(t, user) != 0 {
				t.Errorf("a has %d entries, b %d; want both here, at a", a.entries(t, user), b.entries(t, user))
			}
			forwarded, failed, fellBack := a.seen.counts()
			if forwarded != 0 || !maps.Equal(failed, map[string]int{tc.reason: 1}) || fellBack != 1 {
				t.Errorf("forwarded %d, failed %v, fell back %d; want 0, one %s, 1 (then the owner is down)", forwarded, failed, fellBack, tc.reason)
			}
			if owner, remote := a.peers.Owner(user); remote {
				t.Errorf("%s is owned by %s after its owner failed", user, owner)
			}
		})
	}
}

// An owner that refuses the peer token (credentials that differ between
// instances) gave no answer: the mutation is committed here, and the
// refusal is counted as such.
func TestForwardRefusedByThePeer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	creds := auth.GenerateDev()
	// A peer that passes its health checks and refuses every call.
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+affinity.HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"instance":"other"}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, `{"code":"unauthenticated","message":"unknown token"}`)
	})
	other := httptest.NewUnstartedServer(mux)
	other.Config.Protocols = new(http.Protocols)
	other.Config.Protocols.SetUnencryptedHTTP2(true)
	other.Start()
	t.Cleanup(other.Close)
	a := cluster(t, 1, creds, clusterOptions{extra: []string{other.URL}})[0]
	user := ownedBy(t, a, other.URL)
	if _, err := a.client(creds.ServiceToken).Grant(ctx, grant(user, "g1")); err != nil {
		t.Fatalf("grant with an owner that refuses the peer token: %v", err)
	}
	forwarded, failed, fellBack := a.seen.counts()
	if a.entries(t, user) != 1 || forwarded != 0 || !maps.Equal(failed, map[string]int{affinity.FailRefused: 1}) || fellBack != 1 {
		t.Errorf("%d entries here, forwarded %d, failed %v, fell back %d; want 1, 0, one refused, 1", a.entries(t, user), forwarded, failed, fellBack)
	}
}
