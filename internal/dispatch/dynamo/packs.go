package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// packPK is the partition of an endpoint's packs.
func packPK(endpointID string) string { return "S#" + endpointID }

// packItem is p as an item (doc.go): PK "S#<endpoint_id>", SK "<highest
// event id>#<a new ULID>", lo (the lowest event id), users (a string
// set) and ev, the events as text, one a line: user, version, event id,
// type, attempt time (unix ns), status, duration (ns), tab-separated
// (user ids and event types have no tab or line break).
func packItem(p dispatch.Pack) map[string]types.AttributeValue {
	var b strings.Builder
	for i, e := range p.Events {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s\t%d\t%s\t%s\t%d\t%d\t%d", e.UserID, e.Version, e.EventID, e.Type,
			e.Attempt.Time.UnixNano(), e.Attempt.Status, int64(e.Attempt.Duration))
	}
	return map[string]types.AttributeValue{
		"PK": ddbattr.S(packPK(p.EndpointID)), "SK": ddbattr.S(p.High() + "#" + ulid.Make().String()),
		"lo":    ddbattr.S(p.Low()),
		"users": &types.AttributeValueMemberSS{Value: p.Users()},
		"ev":    ddbattr.S(b.String()),
	}
}

// decodePack reads a pack item of endpointID.
func decodePack(endpointID string, item map[string]types.AttributeValue) (dispatch.Pack, error) {
	p := dispatch.Pack{EndpointID: endpointID, Key: ddbattr.Text(item, "SK")}
	for line := range strings.SplitSeq(ddbattr.Text(item, "ev"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 7 {
			return p, fmt.Errorf("pack %s: event %q", p.Key, line)
		}
		version, err1 := strconv.ParseInt(f[1], 10, 64)
		t, err2 := strconv.ParseInt(f[4], 10, 64)
		status, err3 := strconv.Atoi(f[5])
		took, err4 := strconv.ParseInt(f[6], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return p, fmt.Errorf("pack %s: event %q", p.Key, line)
		}
		p.Events = append(p.Events, dispatch.Packed{
			EventID: f[2], Type: ledger.EventType(f[3]), UserID: f[0], Version: version,
			Attempt: dispatch.Attempt{Time: time.Unix(0, t).UTC(), Status: status, Duration: time.Duration(took)},
		})
	}
	return p, nil
}

// PutPacks is dispatch.Store's: BatchWriteItem, 25 packs a call, as
// PutRows.
func (s *Store) PutPacks(ctx context.Context, packs []dispatch.Pack) error {
	items := make([]map[string]types.AttributeValue, 0, len(packs))
	for _, p := range packs {
		if len(p.Events) > 0 {
			items = append(items, packItem(p))
		}
	}
	if err := s.putAll(ctx, items); err != nil {
		return fmt.Errorf("put packs: %w", err)
	}
	return nil
}

// Packs is dispatch.Store's: one consistent Query of the endpoint's
// packs, highest key first.
func (s *Store) Packs(ctx context.Context, endpointID, below string, limit int) ([]dispatch.Pack, error) {
	in := &dynamodb.QueryInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(false),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(packPK(endpointID))},
		Limit:                     aws.Int32(int32(limit)),
	}
	if below != "" {
		in.KeyConditionExpression = aws.String("PK = :pk AND SK < :below")
		in.ExpressionAttributeValues[":below"] = ddbattr.S(below)
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("read packs: %w", err)
	}
	packs := make([]dispatch.Pack, 0, len(out.Items))
	for _, item := range out.Items {
		p, err := decodePack(endpointID, item)
		if err != nil {
			return nil, err
		}
		packs = append(packs, p)
	}
	return packs, nil
}

// PackedOf is dispatch.Store's: a consistent Query of the packs of
// dispatch.PackWindow, filtered on their lowest event id.
func (s *Store) PackedOf(ctx context.Context, endpointID, eventID string) ([]dispatch.Packed, error) {
	from, to, ok := dispatch.PackWindow(eventID)
	if !ok {
		return nil, nil
	}
	in := &dynamodb.QueryInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
		FilterExpression:       aws.String("lo <= :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": ddbattr.S(packPK(endpointID)), ":from": ddbattr.S(from), ":to": ddbattr.S(to), ":id": ddbattr.S(eventID),
		},
	}
	var found []dispatch.Packed
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("read packs of %s: %w", eventID, err)
		}
		for _, item := range out.Items {
			p, err := decodePack(endpointID, item)
			if err != nil {
				return nil, err
			}
			for _, e := range p.Events {
				if e.EventID == eventID {
					found = append(found, e)
				}
			}
		}
		if out.LastEvaluatedKey == nil {
			return found, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
