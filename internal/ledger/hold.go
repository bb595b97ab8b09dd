package ledger

import (
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// HoldState is where a hold is in its life: HELD until it resolves, exactly
// once, to CAPTURED, VOIDED or EXPIRED.
type HoldState string

const (
	HoldHeld     HoldState = "HELD"
	HoldCaptured HoldState = "CAPTURED"
	HoldVoided   HoldState = "VOIDED"
	HoldExpired  HoldState = "EXPIRED"
)

// Release reasons: what a RELEASE entry's Reason says of why the hold let go.
const (
	ReleaseVoided  = "VOIDED"  // Void asked for it
	ReleaseExpired = "EXPIRED" // the hold reached its expire_time
)

// DefaultMaxHolds bounds a user's open holds, which live in the account.
const DefaultMaxHolds = 25

// Hold is points reserved for a checkout (Authorize): taken from the
// buckets, as a purchase would take them, and kept aside until a Capture
// spends them, a Void gives them back, or its expire_time passes and gives
// them back by time. Its id is the request_id of its Authorize.
type Hold struct {
	RequestID      string
	UserID         string
	Amount         decimal.Decimal // what it holds
	State          HoldState
	ExpireTime     time.Time // strictly before it, the hold may be captured
	OrderID        string
	CapturedAmount decimal.Decimal // once captured
	CreateTime     time.Time
	Version        int64  // of its HOLD entry
	Draws          []Draw // what it took from which bucket, in spending order
	// Where it was made (kind.go): its capture is recorded under them.
	MerchantID string
	Category   string
	// ResolveVersion is the version of the entry that resolved it (a
	// CAPTURE or a RELEASE); 0 while held.
	ResolveVersion int64
}

// StateAt is the hold's state at t: a held hold at or past its expire_time
// is expired, by time, before any entry says so.
func (h Hold) StateAt(t time.Time) HoldState {
	if h.State == HoldHeld && !live(h.ExpireTime, t) {
		return HoldExpired
	}
	return h.State
}

// HoldRef is a hold a capture or a void names, as the store read its record:
// only needed when the account holds no open hold of that request_id, to
// tell a resolved hold from one that never was.
type HoldRef struct {
	State HoldState
}

// HoldQuery selects and pages a user's holds.
type HoldQuery struct {
	Page               // the page token is good only with the same states
	States []HoldState // none: open (HELD) holds only
}

// HoldOf is the open hold a HOLD entry makes, as it was made.
func HoldOf(e Entry) Hold {
	return Hold{
		RequestID: e.RequestID, UserID: e.UserID, Amount: e.HeldChange, State: HoldHeld,
		ExpireTime: e.ExpireTime, OrderID: e.OrderID, CreateTime: e.CreateTime, Version: e.Version, Draws: e.Draws,
		MerchantID: e.MerchantID, Category: e.Category,
	}
}

// Hold returns the account's open hold of request_id id.
func (a Account) Hold(id string) (Hold, bool) {
	i := slices.IndexFunc(a.Holds, func(h Hold) bool { return h.RequestID == id })
	if i < 0 {
		return Hold{}, false
	}
	return a.Holds[i], true
}

// withoutHold is the account's open holds without the one of request_id id.
func (a Account) withoutHold(id string) []Hold {
	return slices.DeleteFunc(slices.Clone(a.Holds), func(h Hold) bool { return h.RequestID == id })
}

// Available is what the account may spend or hold now: its balance less
// what is held. Every debit, hold or purchase, is checked against it.
func (a Account) Available() decimal.Decimal { return a.Balance.Sub(a.Held) }

// captureDraws says what a capture of amount takes from a hold that drew
// draws: the hold's draws in spending order, soonest expiry first.
func captureDraws(draws []Draw, amount decimal.Decimal) []Draw {
	bs := make([]Bucket, len(draws))
	for i, d := range draws {
		bs[i] = Bucket(d)
	}
	return spend(bs, amount)
}

// released is what a hold that drew draws gives back when captured draws
// of it are spent: the rest of each draw, in the hold's order.
func released(draws, captured []Draw) []Draw {
	var out []Draw
	for _, d := range draws {
		left := d.Amount
		for _, c := range captured {
			if c.Expire.Equal(d.Expire) && c.Kind == d.Kind {
				left = left.Sub(c.Amount)
			}
		}
		if left.IsPositive() {
			out = append(out, Draw{Expire: d.Expire, Amount: left, Kind: d.Kind})
		}
	}
	return out
}

// ResolvedHold is the hold an entry resolves, as it is after the entry: h
// captured or released by e. A HOLD entry's own hold is holdOf.
func ResolvedHold(h Hold, e Entry) Hold {
	h.ResolveVersion = e.Version
	switch {
	case e.Type == EntryCapture:
		h.State, h.CapturedAmount = HoldCaptured, e.Amount.Neg()
	case e.Reason == ReleaseExpired:
		h.State = HoldExpired
	default:
		h.State = HoldVoided
	}
	return h
}

// releasedBy is what capture e of hold h gives back to the buckets: what h
// drew that e did not spend. A capture of a hold the account does not hold
// (a ledger damaged by hand) gives what it did not spend back to the
// never-expiring bucket, so the fold still sums; the audit reports the
// damage.
func releasedBy(h Hold, e Entry) []Draw {
	if h.RequestID == "" {
		rest := e.HeldChange.Neg().Add(e.Amount)
		if !rest.IsPositive() {
			return nil
		}
		return []Draw{{Amount: rest}}
	}
	return released(h.Draws, e.Draws)
}

// Check validates a query of user's holds: the user id, the page size and
// the states. It fills its defaults: HELD when no state is asked for, a
// page size as PageSize reads it. States named twice count once.
func (q HoldQuery) Check(user string) (HoldQuery, error) {
	if err := ValidateUserID(user); err != nil {
		return q, err
	}
	page, err := q.check()
	if err != nil {
		return q, err
	}
	q.Page = page
	var states []HoldState
	for _, s := range q.States {
		switch s {
		case HoldHeld, HoldCaptured, HoldVoided, HoldExpired:
		default:
			return q, Errorf(KindInvalid, ReasonInvalidFilter, "states: %q is not a hold state", s)
		}
		if !slices.Contains(states, s) {
			states = append(states, s)
		}
	}
	if len(states) == 0 {
		states = []HoldState{HoldHeld}
	}
	slices.Sort(states)
	q.States = states
	return q, nil
}

// Matches says whether h, as it is at t (StateAt), is in one of q's states.
func (q HoldQuery) Matches(h Hold, t time.Time) bool {
	return slices.Contains(q.States, h.StateAt(t))
}
