package metrics

import (
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/pointledger/pointledger/client"
)

func refusal(code connect.Code, reason string) error {
	err := connect.NewError(code, errors.New("refused"))
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: client.ErrorDomain}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// Refusals are counted by their reason (issue 31: BUDGET_EXHAUSTED was
// counted nowhere), a bounded set: a reason ledgerd does not send, or an
// error without one, is "other"; every known reason starts at 0.
func TestRefusalsByReason(t *testing.T) {
	t.Parallel()
	const grant = "/pointledger.v1.LedgerService/Grant"
	m := New(grant)
	start := time.Now()
	m.observeRequest(grant, start, refusal(connect.CodeFailedPrecondition, "BUDGET_EXHAUSTED"))
	m.observeRequest(grant, start, refusal(connect.CodeFailedPrecondition, "BUDGET_EXHAUSTED"))
	m.observeRequest(grant, start, refusal(connect.CodeInvalidArgument, "SOMETHING_NEW"))
	m.observeRequest(grant, start, connect.NewError(connect.CodeResourceExhausted, errors.New("too big")))
	m.observeRequest(grant, start, nil)
	for reason, want := range map[string]float64{
		"BUDGET_EXHAUSTED": 2, "INSUFFICIENT_BALANCE": 0, "other": 2,
	} {
		if got := testutil.ToFloat64(m.refusals.counter.WithLabelValues(reason)); got != want {
			t.Errorf("refusals{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if n, want := testutil.CollectAndCount(m.refusals.counter), len(client.Reasons())+1; n != want {
		t.Errorf("%d refusal series, want %d: the known reasons and other", n, want)
	}
}
