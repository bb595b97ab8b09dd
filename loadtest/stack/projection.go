package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// ProjectionStatus is ledgerd's GET /projection/status, on its operations
// listener.
type ProjectionStatus struct {
	Running bool  `json:"running"`
	Lag     int64 `json:"lag_ns"`
}

// ReadProjectionStatus asks the operations listener at opsURL.
func ReadProjectionStatus(c *http.Client, opsURL string) (ProjectionStatus, error) {
	var st ProjectionStatus
	if opsURL == "" {
		return st, errors.New("no operations listener to ask (-target-ops)")
	}
	res, err := c.Get(opsURL + "/projection/status")
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /projection/status: %s", res.Status)
	}
	return st, json.NewDecoder(res.Body).Decode(&st)
}

// SampleLag reads the projector's lag every 500ms until ctx ends, and then
// sends the samples; opsURL says where to ask each time (an instance in
// service). A target without a projector, or without an operations
// listener to ask, gives none.
func SampleLag(ctx context.Context, c *http.Client, opsURL func() string) <-chan []time.Duration {
	out := make(chan []time.Duration, 1)
	go func() {
		var lags []time.Duration
		defer func() { out <- lags }()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st, err := ReadProjectionStatus(c, opsURL()); err == nil && st.Running {
				lags = append(lags, time.Duration(st.Lag))
			}
		}
	}()
	return out
}

// historyDelay waits for e to show in its user's history and returns how
// long after e's commit that was (at most 30 s).
func historyDelay(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, e *pb.Entry) (time.Duration, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: e.UserId, PageSize: 1}))
		if err != nil {
			return 0, err
		}
		if len(res.Msg.Items) > 0 && res.Msg.Items[0].Version >= e.Version {
			return time.Since(e.CreateTime.AsTime()), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("the last purchase (or capture) was not in ListHistory 30 s after the run")
}

// ProjectionNotes: how far the projection lagged during the runs, and how
// soon the last purchase (or capture) showed in ListHistory.
func ProjectionNotes(ctx context.Context, client pointledgerv1connect.LedgerServiceClient, last *pb.Entry, lags []time.Duration) []string {
	var notes []string
	if len(lags) > 0 {
		slices.Sort(lags)
		notes = append(notes, fmt.Sprintf("projection lag p50 %s, max %s (%d samples of /projection/status every 500ms)",
			lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond), len(lags)))
	} else {
		notes = append(notes, "no projector running in ledgerd (or no -target-ops to ask)")
	}
	if last != nil && len(lags) > 0 {
		if d, err := historyDelay(ctx, client, last); err != nil {
			notes = append(notes, err.Error())
		} else {
			notes = append(notes, fmt.Sprintf("the last purchase (or capture) was in ListHistory %s after it was committed", d.Round(time.Millisecond)))
		}
	}
	return notes
}
