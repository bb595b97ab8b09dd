package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// endpointsPK is the one partition of every endpoint: they are few (an
// installation has tens, not thousands) and read together, with one
// consistent Query, by every dispatcher.
const endpointsPK = "ENDPOINTS"

// EndpointsAPI is the part of the DynamoDB client Endpoints uses.
type EndpointsAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Endpoints keeps webhook endpoints in the webhooks table. It checks
// nothing about a URL or event types: the caller (the API) does, with
// webhook.URLPolicy and ledger.ParseSubscription, before it calls.
// It is the endpoints of dispatch.Store.
type Endpoints struct {
	ids   dispatch.EndpointIDs
	db    EndpointsAPI
	table string
	now   func() time.Time
}

// NewEndpoints returns the endpoints of table; now nil means time.Now.
func NewEndpoints(db EndpointsAPI, table string, now func() time.Time) *Endpoints {
	if now == nil {
		now = time.Now
	}
	return &Endpoints{db: db, table: table, now: now}
}

// Create stores a new endpoint with e's URL, event types and description,
// a new id, the time now and a new secret, and returns it with the
// secret: the only time the secret is shown.
func (s *Endpoints) Create(ctx context.Context, e dispatch.Endpoint) (dispatch.Endpoint, webhook.Secret, error) {
	now := s.now().UTC()
	secret := webhook.NewSecret()
	e.ID = s.ids.New(now)
	e.CreateTime = now
	e.Disabled, e.DisabledReason = false, ""
	e.Secrets = []dispatch.SigningSecret{{Secret: secret}}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &s.table,
		Item:                endpointItem(e, 1),
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	})
	if err != nil {
		return dispatch.Endpoint{}, webhook.Secret{}, fmt.Errorf("create endpoint: %w", err)
	}
	return e, secret, nil
}

// Get returns the endpoint with id, read consistently, or ENDPOINT_NOT_FOUND.
func (s *Endpoints) Get(ctx context.Context, id string) (dispatch.Endpoint, error) {
	e, _, err := s.get(ctx, id)
	return e, err
}

func (s *Endpoints) get(ctx context.Context, id string) (dispatch.Endpoint, int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            endpointKey(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return dispatch.Endpoint{}, 0, fmt.Errorf("get endpoint: %w", err)
	}
	if out.Item == nil {
		return dispatch.Endpoint{}, 0, dispatch.EndpointNotFound(id)
	}
	return decodeEndpoint(out.Item)
}

// List returns every endpoint, oldest first, read consistently.
func (s *Endpoints) List(ctx context.Context) ([]dispatch.Endpoint, error) {
	var out []dispatch.Endpoint
	var start map[string]types.AttributeValue
	for {
		page, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("PK = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(endpointsPK)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("list endpoints: %w", err)
		}
		for _, item := range page.Items {
			e, _, err := decodeEndpoint(item)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if page.LastEvaluatedKey == nil {
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
}

// Page is dispatch.EndpointStore's: one consistent Query of the
// endpoints' partition from after's key, for size and one more.
func (s *Endpoints) Page(ctx context.Context, after string, size int) ([]dispatch.Endpoint, string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(endpointsPK)},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(size + 1)),
	}
	if after != "" {
		in.ExclusiveStartKey = endpointKey(after)
	}
	var out []dispatch.Endpoint
	for len(out) <= size {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("list endpoints: %w", err)
		}
		for _, item := range page.Items {
			e, _, err := decodeEndpoint(item)
			if err != nil {
				return nil, "", err
			}
			out = append(out, e)
		}
		if page.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	if len(out) <= size {
		return out, "", nil
	}
	return out[:size], out[size-1].ID, nil
}

// Update reads the endpoint with id, lets change alter it (its id, create
// time and secrets are kept whatever change does) and writes it back under
// a condition on the version it read. When another writer changed the
// endpoint meanwhile (a dispatcher disabling it on a 410, a rotation), it
// reads it again and applies change to what it reads, a few times, before
// it gives up with dispatch.ErrEndpointChanged.
func (s *Endpoints) Update(ctx context.Context, id string, change func(*dispatch.Endpoint) error) (dispatch.Endpoint, error) {
	return dispatch.UpdateEndpoint(id, func() (dispatch.Endpoint, int64, error) { return s.get(ctx, id) },
		func(e dispatch.Endpoint, rvn int64) error { return s.replace(ctx, e, rvn) }, change)
}

// Disable marks the endpoint disabled with reason (the dispatcher does on
// a 410); an endpoint already disabled keeps its first reason.
func (s *Endpoints) Disable(ctx context.Context, id, reason string) error {
	return dispatch.DisableEndpoint(ctx, s, id, reason)
}

// Rotate gives the endpoint a new secret and returns it (the only time it
// is shown). The secret it replaces signs beside it for dispatch.RotationOverlap; a
// secret rotated out before that is dropped at once.
func (s *Endpoints) Rotate(ctx context.Context, id string) (webhook.Secret, error) {
	e, rvn, err := s.get(ctx, id)
	if err != nil {
		return webhook.Secret{}, err
	}
	secret, secrets := dispatch.RotatedSecrets(e.Secrets, s.now())
	e.Secrets = secrets
	if err := s.replace(ctx, e, rvn); err != nil {
		return webhook.Secret{}, err
	}
	return secret, nil
}

// CountRedelivery adds one to the endpoint's redeliveries and its record
// version, in one conditional Update.
func (s *Endpoints) CountRedelivery(ctx context.Context, id string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       endpointKey(id),
		UpdateExpression:          aws.String("ADD redeliveries :one, rvn :one"),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": ddbattr.Int(1)},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return dispatch.EndpointNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("count a redelivery: %w", err)
	}
	return nil
}

// Delete removes the endpoint; ENDPOINT_NOT_FOUND if there is none.
func (s *Endpoints) Delete(ctx context.Context, id string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           &s.table,
		Key:                 endpointKey(id),
		ConditionExpression: aws.String("attribute_exists(PK)"),
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return dispatch.EndpointNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	return nil
}

func (s *Endpoints) replace(ctx context.Context, e dispatch.Endpoint, rvn int64) error {
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 &s.table,
		Item:                      endpointItem(e, rvn+1),
		ConditionExpression:       aws.String("rvn = :rvn"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":rvn": ddbattr.Int(rvn)},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return dispatch.ErrEndpointChanged
	}
	if err != nil {
		return fmt.Errorf("write endpoint: %w", err)
	}
	return nil
}

func endpointKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(endpointsPK), "SK": ddbattr.S("EP#" + id)}
}

func endpointItem(e dispatch.Endpoint, rvn int64) map[string]types.AttributeValue {
	item := endpointKey(e.ID)
	item["endpoint_id"] = ddbattr.S(e.ID)
	item["url"] = ddbattr.S(e.URL)
	names := make([]types.AttributeValue, len(e.EventTypes))
	for i, t := range e.EventTypes {
		names[i] = ddbattr.S(t)
	}
	item["event_types"] = &types.AttributeValueMemberL{Value: names}
	item["description"] = ddbattr.S(e.Description)
	item["disabled"] = &types.AttributeValueMemberBOOL{Value: e.Disabled}
	item["disabled_reason"] = ddbattr.S(e.DisabledReason)
	item["create_time"] = ddbattr.Int(e.CreateTime.UnixNano())
	secrets := make([]types.AttributeValue, len(e.Secrets))
	for i, s := range e.Secrets {
		var retire int64
		if !s.RetireTime.IsZero() {
			retire = s.RetireTime.UnixNano()
		}
		secrets[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"secret": ddbattr.S(s.Secret.Text()), "retire_time": ddbattr.Int(retire),
		}}
	}
	item["secrets"] = &types.AttributeValueMemberL{Value: secrets}
	item["redeliveries"] = ddbattr.Int(e.Redeliveries)
	item["rvn"] = ddbattr.Int(rvn)
	return item
}

func decodeEndpoint(item map[string]types.AttributeValue) (dispatch.Endpoint, int64, error) {
	var e dispatch.Endpoint
	e.ID = ddbattr.Text(item, "endpoint_id")
	e.URL = ddbattr.Text(item, "url")
	if l, ok := item["event_types"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				e.EventTypes = append(e.EventTypes, s.Value)
			}
		}
	}
	sub, err := ledger.ParseSubscription(e.EventTypes)
	if err != nil {
		return e, 0, fmt.Errorf("endpoint %s: stored event types: %w", e.ID, err)
	}
	e.Subscription = sub
	e.Description = ddbattr.Text(item, "description")
	if b, ok := item["disabled"].(*types.AttributeValueMemberBOOL); ok {
		e.Disabled = b.Value
	}
	e.DisabledReason = ddbattr.Text(item, "disabled_reason")
	e.CreateTime = time.Unix(0, ddbattr.IntOf(item, "create_time")).UTC()
	if l, ok := item["secrets"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				continue
			}
			secret, err := webhook.ParseSecret(ddbattr.Text(m.Value, "secret"))
			if err != nil {
				return e, 0, fmt.Errorf("endpoint %s: stored secret: %w", e.ID, err)
			}
			s := dispatch.SigningSecret{Secret: secret}
			if retire := ddbattr.IntOf(m.Value, "retire_time"); retire != 0 {
				s.RetireTime = time.Unix(0, retire).UTC()
			}
			e.Secrets = append(e.Secrets, s)
		}
	}
	e.Redeliveries = ddbattr.IntOf(item, "redeliveries")
	return e, ddbattr.IntOf(item, "rvn"), nil
}
