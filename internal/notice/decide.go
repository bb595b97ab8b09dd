package notice

import (
	"fmt"
	"slices"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// plan says what a pass does for one user, whose account read
// consistently is a, at now: the notices to decide (new, each with an
// event id from newID) and the written ones Emit has not taken yet
// (retry). leads are sorted, nearest first.
//
// Only buckets live at now with points in them count: a spent bucket is
// gone from the account, an expired one from a.At(now). Of the leads a
// bucket is within, only the nearest is decided, and only while no notice
// of that lead or a nearer one exists: a bucket granted a day before its
// expiry gets the one-day notice, not the seven-day one with it. A retry
// is for a bucket still live with points; a notice of a bucket spent or
// expired since is not sent, as it would not be decided now.
func plan(a ledger.Account, now time.Time, leads []time.Duration, have []Notice, newID func() string) (decide, retry []Notice) {
	at := a.At(now)
	for _, b := range at.Buckets {
		if b.Expire.IsZero() || !b.Amount.IsPositive() {
			continue
		}
		written := slices.DeleteFunc(slices.Clone(have), func(n Notice) bool { return !n.Expire.Equal(b.Expire) || n.Kind != b.Kind })
		for _, n := range written {
			if !n.Emitted {
				retry = append(retry, n)
			}
		}
		lead, ok := nearestLead(leads, b.Expire.Sub(now))
		if !ok || slices.ContainsFunc(written, func(n Notice) bool { return n.Lead <= lead }) {
			continue
		}
		decide = append(decide, Notice{
			UserID: a.UserID,
			Expire: b.Expire,
			Kind:   b.Kind,
			Lead:   lead,
			Event:  event(newID(), a.UserID, a.Version, b, at.Balance.String(), now),
		})
	}
	return decide, retry
}

// nearestLead is the smallest of leads (sorted) that left is within.
func nearestLead(leads []time.Duration, left time.Duration) (time.Duration, bool) {
	for _, l := range leads {
		if left <= l {
			return l, true
		}
	}
	return 0, false
}

// event is the points.expiring event of bucket b, decided at now on the
// account of version.
func event(id, user string, version int64, b ledger.Bucket, balance string, now time.Time) webhook.Event {
	// Shaped as the API writes its fields: int64 and amounts as decimal
	// strings, times as protojson writes a Timestamp.
	d := webhook.NewEventData(id, user, version)
	d.ExpireTime, d.Amount, d.Balance = webhook.FormatTimestamp(b.Expire), b.Amount.String(), balance
	d.Kind = ledger.KindName(b.Kind)
	data, _ := d.JSON() // strings only: it cannot fail
	return webhook.Event{
		ID:      id,
		Type:    ledger.EventPointsExpiring,
		UserID:  user,
		Version: version,
		Time:    now,
		Data:    data,
	}
}

// checkLeads refuses leads that are not positive or are named twice, and
// returns them sorted, nearest first.
func checkLeads(leads []time.Duration) ([]time.Duration, error) {
	if len(leads) == 0 {
		return []time.Duration{DefaultLead}, nil
	}
	sorted := slices.Clone(leads)
	slices.Sort(sorted)
	for i, l := range sorted {
		if l <= 0 {
			return nil, fmt.Errorf("notice leads: %s is not positive: a notice goes before its bucket expires", l)
		}
		if i > 0 && sorted[i-1] == l {
			return nil, fmt.Errorf("notice leads: %s is named twice", l)
		}
	}
	return sorted, nil
}
