package check

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
)

// holdsChecked says, in words, what checkHolds checks.
var holdsChecked = []string{
	"holds, per user through ledgerd's API: GetBalance's balance and held = the fold of ListEntries; available = balance - held, never negative, nor after any entry; held = the sum of the open holds in ListHolds",
	"holds: each made by one HOLD entry, resolved by at most one CAPTURE or RELEASE, which agrees with its state in ListHolds; no capture exceeds its hold",
	"holds against what the load test was told: an acknowledged capture is CAPTURED for its amount, an acknowledged void VOIDED, each by its own entry naming the hold; an abandoned hold (or one whose capture or void was refused) ends EXPIRED, released on the record by the sweeper or a later mutation",
}

// holdsView is what the checks read of one user after a checkout run,
// through ledgerd's API: GetBalance, every entry (ListEntries) and every
// hold in every state (ListHolds).
type holdsView struct {
	user                     string
	balance, available, held decimal.Decimal
	entries                  []ledger.Entry
	holds                    []ledger.Hold
}

var everyHoldState = []pb.HoldState{pb.HoldState_HOLD_STATE_HELD, pb.HoldState_HOLD_STATE_CAPTURED, pb.HoldState_HOLD_STATE_VOIDED, pb.HoldState_HOLD_STATE_EXPIRED}

// readHoldsView reads user's holdsView from ledgerd.
func readHoldsView(ctx context.Context, c pointledgerv1connect.LedgerServiceClient, user string) (holdsView, error) {
	v := holdsView{user: user}
	bal, err := c.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		return v, fmt.Errorf("GetBalance %s: %w", user, err)
	}
	if v.balance, err = decimalOf(bal.Msg.Balance); err == nil {
		if v.available, err = decimalOf(bal.Msg.Available); err == nil {
			v.held, err = decimalOf(bal.Msg.Held)
		}
	}
	if err != nil {
		return v, fmt.Errorf("GetBalance %s: %w", user, err)
	}
	err = eachPage(func(token string) (string, error) {
		res, err := c.ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: user, PageSize: 500, PageToken: token}))
		if err != nil {
			return "", fmt.Errorf("ListEntries %s: %w", user, err)
		}
		for _, e := range res.Msg.Entries {
			le, err := entryFromProto(e)
			if err != nil {
				return "", fmt.Errorf("ListEntries %s: entry %d: %w", user, e.Version, err)
			}
			v.entries = append(v.entries, le)
		}
		return res.Msg.NextPageToken, nil
	})
	if err != nil {
		return v, err
	}
	err = eachPage(func(token string) (string, error) {
		res, err := c.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: user, States: everyHoldState, PageSize: 500, PageToken: token}))
		if err != nil {
			return "", fmt.Errorf("ListHolds %s: %w", user, err)
		}
		for _, h := range res.Msg.Holds {
			lh, err := holdFromProto(h)
			if err != nil {
				return "", fmt.Errorf("ListHolds %s: hold %s: %w", user, h.RequestId, err)
			}
			v.holds = append(v.holds, lh)
		}
		return res.Msg.NextPageToken, nil
	})
	return v, err
}

// eachPage reads pages with read, from the first (token "") until one says
// there is no next.
func eachPage(read func(token string) (next string, err error)) error {
	for token := ""; ; {
		next, err := read(token)
		if err != nil || next == "" {
			return err
		}
		token = next
	}
}

// checkHolds checks one user's holds (v) against themselves and against
// what the load test sent for that user and was told (sent), and returns
// each violation.
func checkHolds(v holdsView, sent []*sentRequest) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, v.user+": "+fmt.Sprintf(format, args...)) }

	folded, _, err := ledger.Fold(v.user, v.entries)
	if err != nil {
		bad("ListEntries: %v", err)
	}
	if !folded.Balance.Equal(v.balance) {
		bad("GetBalance says balance %s, ListEntries fold to %s", v.balance, folded.Balance)
	}
	if !folded.Held.Equal(v.held) {
		bad("GetBalance says held %s, ListEntries fold to %s", v.held, folded.Held)
	}
	if !v.available.Equal(v.balance.Sub(v.held)) {
		bad("GetBalance says available %s, not balance %s - held %s", v.available, v.balance, v.held)
	}
	if v.available.IsNegative() {
		bad("available %s is negative", v.available)
	}
	for _, e := range v.entries {
		if a := e.BalanceAfter.Sub(e.HeldAfter); a.IsNegative() {
			bad("entry %d (%s) left available %s (balance %s, held %s)", e.Version, e.Type, a, e.BalanceAfter, e.HeldAfter)
		}
	}
	open := decimal.Zero
	for _, h := range v.holds {
		if h.State == ledger.HoldHeld {
			open = open.Add(h.Amount)
		}
	}
	if !open.Equal(v.held) {
		bad("held %s, its open holds in ListHolds hold %s", v.held, open)
	}

	made, resolved := holdEntries(v.entries)
	for _, id := range slices.Sorted(maps.Keys(resolved)) {
		rs := resolved[id]
		h, ok := made[id]
		if !ok {
			bad("%s (entry %d) resolves hold %s, which no HOLD entry made", rs[0].Type, rs[0].Version, id)
			continue
		}
		if len(rs) > 1 {
			bad("hold %s resolved %d times: %s", id, len(rs), describe(rs))
		}
		for _, r := range rs {
			if r.Type == ledger.EntryCapture && r.Amount.Neg().GreaterThan(h.HeldChange) {
				bad("capture %s (entry %d) of %s exceeds its hold of %s", r.RequestID, r.Version, r.Amount.Neg(), h.HeldChange)
			}
			if !r.HeldChange.Equal(h.HeldChange.Neg()) {
				bad("%s (entry %d) of hold %s changes held by %s, the hold held %s", r.Type, r.Version, id, r.HeldChange, h.HeldChange)
			}
		}
	}
	listed := map[string]ledger.Hold{}
	for _, h := range v.holds {
		listed[h.RequestID] = h
		hm, ok := made[h.RequestID]
		if !ok {
			bad("ListHolds has hold %s, which no HOLD entry made", h.RequestID)
			continue
		}
		if !h.Amount.Equal(hm.HeldChange) {
			bad("hold %s holds %s in ListHolds, its HOLD entry %s", h.RequestID, h.Amount, hm.HeldChange)
		}
		rs := resolved[h.RequestID]
		switch recorded := stateOnRecord(rs); {
		case h.State == ledger.HoldExpired && recorded == ledger.HoldHeld:
			bad("hold %s has expired, and no RELEASE puts it on the record (neither the sweeper nor a later mutation released it)", h.RequestID)
		case h.State != recorded:
			bad("hold %s is %s in ListHolds, %s on the record", h.RequestID, h.State, recorded)
		case h.State == ledger.HoldCaptured && !h.CapturedAmount.Equal(rs[0].Amount.Neg()):
			bad("hold %s captured %s in ListHolds, its CAPTURE spent %s", h.RequestID, h.CapturedAmount, rs[0].Amount.Neg())
		}
	}
	for _, id := range slices.Sorted(maps.Keys(made)) {
		if _, ok := listed[id]; !ok {
			bad("hold %s (entry %d) is missing from ListHolds", id, made[id].Version)
		}
	}

	for _, s := range sent {
		if s.op.Kind != "authorize" {
			continue
		}
		h, ok := listed[s.op.RequestID]
		switch {
		case !ok && s.acks > 0:
			bad("acknowledged hold %s is not in ListHolds", s.op.RequestID)
		case ok:
			if want := endStates(s, sent); !slices.Contains(want, h.State) {
				bad("hold %s ended %s, want %s (%s)", h.RequestID, h.State, strings.Join(stateNames(want), " or "), fateOf(s, sent))
			}
		}
	}
	byRequest := map[string]ledger.Entry{}
	for _, e := range v.entries {
		byRequest[e.RequestID] = e
	}
	for _, s := range sent {
		e, ok := byRequest[s.op.RequestID]
		if s.acks == 0 || !ok || (s.op.Kind != "capture" && s.op.Kind != "void") {
			continue // whether it is there at all is matchBook's to say
		}
		if e.HoldRequestID != s.op.Hold {
			bad("%s %s of hold %s: its entry %d names hold %s", s.op.Kind, s.op.RequestID, s.op.Hold, e.Version, e.HoldRequestID)
		}
		if h, ok := listed[s.op.Hold]; ok && s.op.Kind == "capture" && h.State == ledger.HoldCaptured && !h.CapturedAmount.Equal(s.op.Amount) {
			bad("hold %s captured %s, its acknowledged capture %s asked for %s", s.op.Hold, h.CapturedAmount, s.op.RequestID, s.op.Amount)
		}
	}
	return out
}

// holdEntries indexes a user's entries by hold: the HOLD entry that made
// each, and the CAPTURE and RELEASE entries that resolved it.
func holdEntries(entries []ledger.Entry) (made map[string]ledger.Entry, resolved map[string][]ledger.Entry) {
	made, resolved = map[string]ledger.Entry{}, map[string][]ledger.Entry{}
	for _, e := range entries {
		switch e.Type {
		case ledger.EntryHold:
			made[e.RequestID] = e
		case ledger.EntryCapture, ledger.EntryRelease:
			resolved[e.HoldRequestID] = append(resolved[e.HoldRequestID], e)
		case ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryRefund, ledger.EntryAdjustment, ledger.EntryExpiration, ledger.EntryMaturation, ledger.EntryReversal:
		}
	}
	return made, resolved
}

// stateOnRecord is the state of a hold its resolving entries (the first of
// them) put on the record.
func stateOnRecord(rs []ledger.Entry) ledger.HoldState {
	switch {
	case len(rs) == 0:
		return ledger.HoldHeld
	case rs[0].Type == ledger.EntryCapture:
		return ledger.HoldCaptured
	case rs[0].Reason == ledger.ReleaseExpired:
		return ledger.HoldExpired
	}
	return ledger.HoldVoided
}

// endStates are the states the hold of authorization a may end in, by
// what the load test sent for it and was told: an acknowledged capture or
// void, that; one refused (the hold had expired, say) or none (abandoned),
// EXPIRED; one whose answer was lost (a timeout), either.
func endStates(a *sentRequest, sent []*sentRequest) []ledger.HoldState {
	want := []ledger.HoldState{ledger.HoldExpired}
	for _, s := range sent {
		if s.op.Hold != a.op.RequestID {
			continue
		}
		state := ledger.HoldVoided
		if s.op.Kind == "capture" {
			state = ledger.HoldCaptured
		}
		switch {
		case s.acks > 0:
			return []ledger.HoldState{state}
		case lostAnswer(s):
			want = append(want, state)
		}
	}
	return want
}

// lostAnswer says whether none of s's answers said what became of it: a
// timeout, or a busy ledger's aborted or unavailable.
func lostAnswer(s *sentRequest) bool {
	for c := range s.codes {
		if transient[c] || c == "not_answered" {
			return true
		}
	}
	return false
}

// fateOf says, for a violation, what the load test sent for the hold of
// authorization a and what it was told.
func fateOf(a *sentRequest, sent []*sentRequest) string {
	parts := []string{fmt.Sprintf("authorize %v", a.codes)}
	for _, s := range sent {
		if s.op.Hold == a.op.RequestID {
			parts = append(parts, fmt.Sprintf("%s %s of %s %v", s.op.Kind, s.op.RequestID, s.op.Amount, s.codes))
		}
	}
	if len(parts) == 1 {
		parts = append(parts, "abandoned")
	}
	return strings.Join(parts, ", ")
}

func stateNames(states []ledger.HoldState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

func describe(es []ledger.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = fmt.Sprintf("%s %s (entry %d)", e.Type, cmp.Or(e.RequestID, e.Reason), e.Version)
	}
	return strings.Join(parts, ", ")
}

func decimalOf(s string) (decimal.Decimal, error) {
	if s == "" {
		return decimal.Zero, nil
	}
	return decimal.NewFromString(s)
}

// entryFromProto is an entry as ListEntries gave it, with what the checks
// fold and compare.
func entryFromProto(e *pb.Entry) (ledger.Entry, error) {
	t := ledger.EntryType(strings.TrimPrefix(e.Type.String(), "ENTRY_TYPE_"))
	if _, ok := t.Info(); !ok {
		return ledger.Entry{}, fmt.Errorf("entry type %s", e.Type)
	}
	out := ledger.Entry{ID: e.EntryId, UserID: e.UserId, Version: e.Version, Type: t, RequestID: e.RequestId,
		OrderID: e.OrderId, Reason: e.Reason, HoldRequestID: e.HoldRequestId, PurchaseRequestID: e.PurchaseRequestId}
	if e.ExpireTime != nil {
		out.ExpireTime = e.ExpireTime.AsTime()
	}
	if e.CreateTime != nil {
		out.CreateTime = e.CreateTime.AsTime()
	}
	for _, f := range []struct {
		s  string
		to *decimal.Decimal
	}{{e.Amount, &out.Amount}, {e.BalanceAfter, &out.BalanceAfter}, {e.HeldChange, &out.HeldChange}, {e.HeldAfter, &out.HeldAfter}} {
		d, err := decimalOf(f.s)
		if err != nil {
			return ledger.Entry{}, err
		}
		*f.to = d
	}
	for _, d := range e.Draws {
		amount, err := decimalOf(d.Amount)
		if err != nil {
			return ledger.Entry{}, err
		}
		draw := ledger.Draw{Amount: amount}
		if d.ExpireTime != nil {
			draw.Expire = d.ExpireTime.AsTime()
		}
		out.Draws = append(out.Draws, draw)
	}
	return out, nil
}

// holdFromProto is a hold as ListHolds gave it.
func holdFromProto(h *pb.Hold) (ledger.Hold, error) {
	out := ledger.Hold{RequestID: h.RequestId, UserID: h.UserId, State: ledger.HoldState(strings.TrimPrefix(h.State.String(), "HOLD_STATE_")), OrderID: h.OrderId}
	if !slices.Contains(everyHoldState, h.State) {
		return ledger.Hold{}, fmt.Errorf("state %s", h.State)
	}
	var err error
	if out.Amount, err = decimalOf(h.Amount); err != nil {
		return ledger.Hold{}, err
	}
	if out.CapturedAmount, err = decimalOf(h.CapturedAmount); err != nil {
		return ledger.Hold{}, err
	}
	if h.ExpireTime != nil {
		out.ExpireTime = h.ExpireTime.AsTime()
	}
	return out, nil
}
