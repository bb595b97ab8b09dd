package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Apply projects entries (from the stream: any users, any order, possibly
// duplicated) into history. For each user it applies versions in order:
// one already applied is skipped, and a gap before an entry is filled from
// the ledger. Users are applied concurrently.
func (h *History) Apply(ctx context.Context, entries []ledger.Entry) error {
	byUser := map[string][]ledger.Entry{}
	for _, e := range entries {
		byUser[e.UserID] = append(byUser[e.UserID], e)
	}
	return forEach(ctx, 8, mapsKeys(byUser), func(user string) error {
		es := byUser[user]
		slices.SortFunc(es, func(a, b ledger.Entry) int { return int(a.Version - b.Version) })
		return h.applyUser(ctx, user, es, es[len(es)-1].Version)
	})
}

// applyUser brings user's history up to version target, using entries
// (sorted) where they fit and the ledger where they leave a gap.
func (h *History) applyUser(ctx context.Context, user string, entries []ledger.Entry, target int64) error {
	st, err := h.State(ctx, user)
	if err != nil {
		return err
	}
	for conflicts := 0; st.Version < target; {
		for len(entries) > 0 && entries[0].Version <= st.Version {
			entries = entries[1:] // applied already
		}
		var batch []ledger.Entry
		if len(entries) > 0 && entries[0].Version == st.Version+1 {
			for i := 0; i < len(entries) && len(batch) < maxBatch && entries[i].Version == st.Version+int64(i)+1; i++ {
				batch = append(batch, entries[i])
			}
		} else {
			upTo := target
			if len(entries) > 0 {
				upTo = entries[0].Version - 1
			}
			batch, err = h.ledger.EntriesAfter(ctx, user, st.Version, int(min(upTo-st.Version, maxBatch)))
			if err != nil {
				return fmt.Errorf("fill history gap of %q after version %d: %w", user, st.Version, err)
			}
			if len(batch) == 0 || batch[0].Version != st.Version+1 {
				return fmt.Errorf("fill history gap of %q: the ledger has no entry %d", user, st.Version+1)
			}
		}
		next, err := h.commit(ctx, st, batch)
		if errors.Is(err, errStateMoved) {
			// Another projector (or a rebuild) moved the state: read it again.
			if conflicts++; conflicts > 100 {
				return fmt.Errorf("history of %q: state keeps moving", user)
			}
			if st, err = h.State(ctx, user); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		st = next
	}
	return nil
}

var errStateMoved = errors.New("history state moved")

// runningAttribute is the attribute of the history item that entries of
// type t add to (history.AddsTo): a refund to its purchase's
// refunded_amount, a reversal to its grant's reversed_amount, as the
// ledger's items name them.
func runningAttribute(t ledger.EntryType) string {
	if t == ledger.EntryReversal {
		return "reversed_amount"
	}
	return "refunded_amount"
}

// commit writes a run of consecutive entries following st and the new state,
// in one transaction guarded by the state's version.
func (h *History) commit(ctx context.Context, st history.State, batch []ledger.Entry) (history.State, error) {
	next := st
	items := make([]types.TransactWriteItem, 0, len(batch)+1)
	// A running amount in history (a purchase's refunded amount, a grant's
	// reversed amount; history.Running) is the sum of the entries applied
	// after its own that add to it: it starts at zero, and each such entry
	// adds to it here, in the transaction that applies that entry (so once).
	inBatch := map[int64]int{}                // version -> index of its Put
	additions := map[int64]*decimal.Decimal{} // version -> what one Update adds to it
	attrs := map[int64]string{}               // and the attribute it adds to
	var added []int64                         // those versions, in order
	for _, e := range batch {
		next = next.Add(e)
		if _, ok := history.Running(e); ok {
			e = history.WithRunning(e, decimal.Zero)
			inBatch[e.Version] = len(items)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &h.table, Item: h.historyItem(e)}})
		v, amount, ok := history.AddsTo(e)
		if !ok {
			continue
		}
		attr := runningAttribute(e.Type)
		if i, ok := inBatch[v]; ok {
			// Its entry is written by this transaction too: add to its item
			// (which has no attribute while it is zero, as a grant's
			// reversed amount).
			item := items[i].Put.Item
			had := decimal.Zero
			if n, ok := item[attr].(*types.AttributeValueMemberN); ok {
				had, _ = decimal.NewFromString(n.Value)
			}
			item[attr] = ddbattr.Decimal(had.Add(amount))
			continue
		}
		// A transaction may touch an item once: what adds to one item adds up.
		if sum, ok := additions[v]; ok {
			*sum = sum.Add(amount)
			continue
		}
		additions[v], attrs[v] = &amount, attr
		added = append(added, v)
	}
	for _, v := range added {
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 &h.table,
			Key:                       h.key(st.UserID, historySK(v)),
			UpdateExpression:          aws.String("SET #a = if_not_exists(#a, :zero) + :r"),
			ConditionExpression:       aws.String("attribute_exists(PK)"),
			ExpressionAttributeNames:  map[string]string{"#a": attrs[v]},
			ExpressionAttributeValues: map[string]types.AttributeValue{":r": ddbattr.Decimal(*additions[v]), ":zero": ddbattr.Int(0)},
		}})
	}
	cond := "version = :expected"
	values := map[string]types.AttributeValue{":expected": ddbattr.Int(st.Version)}
	if st.Version == 0 {
		cond, values = "attribute_not_exists(PK)", nil
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName:                 &h.table,
		Item:                      h.stateItem(next),
		ConditionExpression:       &cond,
		ExpressionAttributeValues: values,
	}})
	_, err := h.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		reasons := canceled.CancellationReasons
		if n := len(reasons); n == len(items) && aws.ToString(reasons[n-1].Code) == "None" {
			for i, r := range reasons {
				if aws.ToString(r.Code) == "ConditionalCheckFailed" && items[i].Update != nil {
					return st, fmt.Errorf("history of %q has no item for the purchase or grant a refund or reversal updates (%v): rebuild it", st.UserID, items[i].Update.Key["SK"])
				}
			}
		}
		return st, fmt.Errorf("%w: %w", errStateMoved, err)
	}
	if err != nil {
		return st, fmt.Errorf("write history of %q: %w", st.UserID, err)
	}
	return next, nil
}

// CatchUp brings every user whose history is behind the ledger up to date,
// from the ledger. It is how the projection recovers stream records it can
// no longer read (older than the stream keeps).
func (h *History) CatchUp(ctx context.Context) (users int, err error) {
	var mu sync.Mutex
	err = h.ledger.Accounts(ctx, 4, func(a ledger.Account) error {
		st, err := h.State(ctx, a.UserID)
		if err != nil || st.Version >= a.Version {
			return err
		}
		mu.Lock()
		users++
		mu.Unlock()
		return h.applyUser(ctx, a.UserID, nil, a.Version)
	})
	return users, err
}

// forEach runs f on every key with at most k at once; the first error
// cancels the rest and is returned.
func forEach(ctx context.Context, k int, keys []string, f func(string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	for _, key := range keys {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(key); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
