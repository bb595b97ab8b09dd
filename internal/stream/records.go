package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// apply hands the new entries of a batch of stream records to the handler.
// Only new entries matter: an entry is immutable but for a purchase's
// refunded amount, which its refund entries carry (the projection's
// history adds them up), so the MODIFY records of purchases are not
// needed, and it does not matter whether they arrive, or in which order.
func (c *Consumer) apply(ctx context.Context, records []types.Record) error {
	var inserts []ledger.Entry
	for _, r := range records {
		sk, _ := r.Dynamodb.Keys["SK"].(*types.AttributeValueMemberS)
		if sk == nil || !dynamo.IsEntryKey(sk.Value) {
			continue // accounts and request records are not entries
		}
		switch r.EventName {
		case types.OperationTypeInsert:
		case types.OperationTypeModify:
			continue // a purchase's refunded amount: its refund entries say it
		default:
			c.log.WarnContext(ctx, "an entry was removed from the ledger; the stream passes it over", "sk", sk.Value)
			continue
		}
		e, ok, err := dynamo.DecodeEntry(fromStream(r.Dynamodb.NewImage))
		if err == nil && !ok {
			err = errors.New("not an entry")
		}
		if err != nil {
			return fmt.Errorf("decode stream record %s: %w", aws.ToString(r.Dynamodb.SequenceNumber), err)
		}
		inserts = append(inserts, e)
	}
	if len(inserts) > 0 {
		if err := c.handler.Apply(ctx, inserts); err != nil {
			return err
		}
	}
	if n := len(inserts); n > 0 {
		newest := inserts[0].CreateTime
		for _, e := range inserts {
			if e.CreateTime.After(newest) {
				newest = e.CreateTime
			}
		}
		c.mu.Lock()
		c.applied += int64(n)
		c.lastSeen, c.lastLag = newest, time.Since(newest)
		c.mu.Unlock()
	}
	return nil
}

// entryImages is GetRecords' option that reads the images of the ledger's
// entries only (with ddbwire.LeanGetRecords; nothing with another client):
// apply reads no other record's, and the account's two images and the
// request record's hold two thirds of a purchase's attributes in a page.
var entryImages = ddbwire.KeepImagesOf(func(keys map[string]types.AttributeValue) bool {
	sk, _ := keys["SK"].(*types.AttributeValueMemberS)
	return sk != nil && dynamo.IsEntryKey(sk.Value)
})

// fromStream converts a stream image to the DynamoDB client's attribute
// values (the two SDK packages have twin types).
func fromStream(item map[string]types.AttributeValue) map[string]ddbtypes.AttributeValue {
	out := make(map[string]ddbtypes.AttributeValue, len(item))
	for k, v := range item {
		out[k] = fromStreamValue(v)
	}
	return out
}

func fromStreamValue(v types.AttributeValue) ddbtypes.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return &ddbtypes.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &ddbtypes.AttributeValueMemberN{Value: v.Value}
	case *types.AttributeValueMemberB:
		return &ddbtypes.AttributeValueMemberB{Value: v.Value}
	case *types.AttributeValueMemberBOOL:
		return &ddbtypes.AttributeValueMemberBOOL{Value: v.Value}
	case *types.AttributeValueMemberNULL:
		return &ddbtypes.AttributeValueMemberNULL{Value: v.Value}
	case *types.AttributeValueMemberSS:
		return &ddbtypes.AttributeValueMemberSS{Value: v.Value}
	case *types.AttributeValueMemberNS:
		return &ddbtypes.AttributeValueMemberNS{Value: v.Value}
	case *types.AttributeValueMemberBS:
		return &ddbtypes.AttributeValueMemberBS{Value: v.Value}
	case *types.AttributeValueMemberM:
		return &ddbtypes.AttributeValueMemberM{Value: fromStream(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]ddbtypes.AttributeValue, len(v.Value))
		for i, x := range v.Value {
			l[i] = fromStreamValue(x)
		}
		return &ddbtypes.AttributeValueMemberL{Value: l}
	}
	return &ddbtypes.AttributeValueMemberNULL{Value: true}
}
