package drive

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// A call to a port where nothing listens, and one cut off by its server,
// are unreachable; an answer of ledgerd's, even an error, is not.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(pointledgerv1connect.NewLedgerServiceHandler(refusingLedger{}))
	mux.HandleFunc("/hang-up/", func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	srv := httptest.NewServer(mux)
	closed := httptest.NewServer(mux)
	closed.Close()
	defer srv.Close()
	for _, c := range []struct {
		name, url string
		want      bool
	}{
		{"an answer of ledgerd's", srv.URL, false},
		{"nothing listens", closed.URL, true},
		{"the connection is closed", srv.URL + "/hang-up", true},
	} {
		x := NewConnectExec(pointledgerv1connect.NewLedgerServiceClient(srv.Client(), c.url))
		out := x.Do(context.Background(), purchase("u"))
		if out.Unreachable != c.want {
			t.Errorf("%s: %+v, want unreachable %v", c.name, out, c.want)
		}
	}
}

type refusingLedger struct {
	pointledgerv1connect.UnimplementedLedgerServiceHandler
}

func (refusingLedger) Purchase(context.Context, *connect.Request[pb.PurchaseRequest]) (*connect.Response[pb.PurchaseResponse], error) {
	return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("insufficient balance"))
}

func purchase(user string) Op {
	return Op{Kind: "purchase", User: user, RequestID: "r", Amount: decimal.NewFromInt(1)}
}
