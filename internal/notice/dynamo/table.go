// Package dynamo keeps the notices of internal/notice in DynamoDB's
// webhooks table: notice.Notices over the AWS SDK, so that package notice
// builds without it. The tests of the notice finder are here too, over
// DynamoDB Local, the ledger's DynamoDB store and the lease table.
package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/notice"
	"github.com/pointledger/pointledger/internal/webhook"
)

// API is the part of the DynamoDB client the notices' table uses.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

var _ notice.Notices = (*Table)(nil)

// Table keeps the notices (notice.Notices) in the webhooks table (internal/dispatch/doc.go):
// PK "N#<user_id>", SK "<expire_time>#<lead>", the expire_time fixed width
// so that a user's notices sort by their bucket's expiry.
type Table struct {
	db   API
	name string
}

// NewTable returns the notices of the webhooks table named name.
func NewTable(db API, name string) *Table { return &Table{db: db, name: name} }

// expireLayout writes an expire_time as the ledger's items do: fixed width
// (microseconds, which the ledger keeps), so that it sorts as text.
const expireLayout = "2006-01-02T15:04:05.000000Z"

func noticePK(user string) string { return "N#" + user }

// noticeSK keys a notice by its bucket (expiry, then kind) and lead; a
// standard bucket's key is as it was before kinds.
func noticeSK(expire time.Time, lead time.Duration, kind string) string {
	sk := expire.UTC().Format(expireLayout) + "#" + lead.String()
	if kind != "" {
		sk += "#" + kind
	}
	return sk
}

// Write puts n unless a notice of its user, bucket and lead exists: the
// one write that makes a notice decided once, however many finders look.
func (t *Table) Write(ctx context.Context, n notice.Notice) error {
	item := map[string]types.AttributeValue{
		"PK":          ddbattr.S(noticePK(n.UserID)),
		"SK":          ddbattr.S(noticeSK(n.Expire, n.Lead, n.Kind)),
		"user_id":     ddbattr.S(n.UserID),
		"expire_time": ddbattr.S(n.Expire.UTC().Format(expireLayout)),
		"lead":        ddbattr.S(n.Lead.String()),
		"event_id":    ddbattr.S(n.Event.ID),
		"type":        ddbattr.S(string(n.Event.Type)),
		"version":     ddbattr.Int(n.Event.Version),
		"event_time":  ddbattr.S(n.Event.Time.UTC().Format(time.RFC3339Nano)),
		"data":        ddbattr.S(string(n.Event.Data)),
		"emitted":     ddbattr.Bool(n.Emitted),
	}
	if n.Kind != "" {
		item["kind"] = ddbattr.S(n.Kind)
	}
	_, err := t.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &t.name,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return notice.ErrNoticeExists
	}
	if err != nil {
		return fmt.Errorf("write notice %s of %q: %w", noticeSK(n.Expire, n.Lead, n.Kind), n.UserID, err)
	}
	return nil
}

// MarkEmitted records that Emit took n, so that no later pass emits it
// again. Only the notice with n's event id is marked.
func (t *Table) MarkEmitted(ctx context.Context, n notice.Notice) error {
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &t.name,
		Key: map[string]types.AttributeValue{
			"PK": ddbattr.S(noticePK(n.UserID)),
			"SK": ddbattr.S(noticeSK(n.Expire, n.Lead, n.Kind)),
		},
		UpdateExpression:          aws.String("SET emitted = :true"),
		ConditionExpression:       aws.String("event_id = :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":true": ddbattr.Bool(true), ":id": ddbattr.S(n.Event.ID)},
	})
	if err != nil {
		return fmt.Errorf("mark notice %s of %q emitted: %w", noticeSK(n.Expire, n.Lead, n.Kind), n.UserID, err)
	}
	return nil
}

// Of reads user's notices of buckets that expire after t, soonest first,
// consistently.
func (t *Table) Of(ctx context.Context, user string, after time.Time) ([]notice.Notice, error) {
	p := dynamodb.NewQueryPaginator(t.db, &dynamodb.QueryInput{
		TableName:              &t.name,
		ConsistentRead:         aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND SK > :after"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": ddbattr.S(noticePK(user)),
			// Every SK of this expiry sorts after it: '#' follows it.
			":after": ddbattr.S(after.UTC().Format(expireLayout) + "#~"),
		},
	})
	var out []notice.Notice
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query notices of %q: %w", user, err)
		}
		for _, item := range page.Items {
			n, err := decodeNotice(item)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
	}
	return out, nil
}

func decodeNotice(item map[string]types.AttributeValue) (notice.Notice, error) {
	get := func(name string) string { return ddbattr.Text(item, name) }
	sk := get("SK")
	expire, err1 := time.Parse(expireLayout, get("expire_time"))
	lead, err2 := time.ParseDuration(get("lead"))
	version, err3 := strconv.ParseInt(get("version"), 10, 64)
	at, err4 := time.Parse(time.RFC3339Nano, get("event_time"))
	var err5 error
	data := json.RawMessage(get("data"))
	if !json.Valid(data) {
		err5 = errors.New("data is not JSON")
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return notice.Notice{}, fmt.Errorf("decode notice %s of %s: %w", sk, get("PK"), err)
	}
	n := notice.Notice{
		UserID: strings.TrimPrefix(get("PK"), "N#"),
		Expire: expire,
		Kind:   get("kind"),
		Lead:   lead,
		Event: webhook.Event{
			ID:      get("event_id"),
			Type:    ledger.EventType(get("type")),
			UserID:  get("user_id"),
			Version: version,
			Time:    at,
			Data:    data,
		},
	}
	if b, ok := item["emitted"].(*types.AttributeValueMemberBOOL); ok {
		n.Emitted = b.Value
	}
	return n, nil
}
