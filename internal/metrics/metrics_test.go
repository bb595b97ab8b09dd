package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pointledger/pointledger/internal/affinity"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

func TestRetriesByReasonAndConflicts(t *testing.T) {
	t.Parallel()
	m := New()
	m.Retried(dynamo.RetryTransactionConflict)
	m.Retried(dynamo.RetryTransactionConflict)
	m.Retried(dynamo.RetryVersionMoved)
	m.Retried(dynamo.RetryThrottled)
	for reason, want := range map[string]float64{
		dynamo.RetryTransactionConflict: 2,
		dynamo.RetryVersionMoved:        1,
		dynamo.RetryThrottled:           1,
		dynamo.RetryStaleCache:          0,
	} {
		if got := testutil.ToFloat64(m.retries.WithLabelValues(reason)); got != want {
			t.Errorf("retries{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.conflicts); got != 2 {
		t.Errorf("conflicts = %v, want 2 (only TransactionConflict retries)", got)
	}
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("operation error DynamoDB: TransactWriteItems: %w", &types.TransactionCanceledException{}), "TransactionCanceledException"},
		{&types.ResourceNotFoundException{}, "ResourceNotFoundException"},
		{fmt.Errorf("get item: %w", context.DeadlineExceeded), "canceled"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "error"},
	} {
		if got := outcome(tt.err); got != tt.want {
			t.Errorf("outcome(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestAffinity(t *testing.T) {
	t.Parallel()
	m := New()
	const purchase = "/pointledger.v1.LedgerService/Purchase"
	m.Forwarded(purchase)
	m.Forwarded(purchase)
	m.ForwardFailed(affinity.FailUnreachable)
	m.FellBack(purchase)
	live, down := 2, 1
	m.WatchPeers(func() (int, int) { return live, down })
	for name, c := range map[string]struct {
		got, want float64
	}{
		"forwarded":   {testutil.ToFloat64(m.forwarded.WithLabelValues(purchase)), 2},
		"unreachable": {testutil.ToFloat64(m.forwardFailures.WithLabelValues(affinity.FailUnreachable)), 1},
		"fallbacks":   {testutil.ToFloat64(m.fallbacks.WithLabelValues(purchase)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	peers := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "pointledger_peers" {
			for _, s := range f.GetMetric() {
				peers[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
	}
	if peers["live"] != 2 || peers["down"] != 1 {
		t.Errorf("pointledger_peers = %v, want live 2 and down 1", peers)
	}
}
