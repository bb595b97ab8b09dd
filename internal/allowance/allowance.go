// Package allowance keeps each support operator's total of adjustments per
// day (auth.Allowances) in DynamoDB, in the lease table, so that the limit
// of a day holds across every instance of a deployment and its restarts.
//
// Invariant: one item per operator and day, ALLOWANCE#<operator>#<day>,
// whose `adjusted` only grows by a conditional update that keeps it at most
// the limit; a give-back subtracts what one take added. The total can be
// larger than what was adjusted (a crash between a take and its give-back),
// never smaller.
package allowance

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ddbattr"
)

// API is the part of the DynamoDB client Table uses.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Table keeps allowances in a table keyed by PK alone (the lease table).
type Table struct {
	db    API
	table string
}

var _ auth.Allowances = (*Table)(nil)

// New returns the allowances kept in table.
func New(db API, table string) *Table { return &Table{db: db, table: table} }

func key(operator, day string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S("ALLOWANCE#" + operator + "#" + day)}
}

// Take adds amount to the operator's total of day if it stays at most limit.
func (t *Table) Take(ctx context.Context, operator, day string, amount, limit decimal.Decimal) (bool, error) {
	room := limit.Sub(amount)
	if room.IsNegative() {
		return false, nil
	}
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &t.table,
		Key:                 key(operator, day),
		UpdateExpression:    aws.String("ADD adjusted :a"),
		ConditionExpression: aws.String("attribute_not_exists(adjusted) OR adjusted <= :room"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":a":    ddbattr.Decimal(amount),
			":room": ddbattr.Decimal(room),
		},
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("take allowance of %s: %w", operator, err)
	}
	return true, nil
}

// Give takes amount back off the operator's total of day.
func (t *Table) Give(ctx context.Context, operator, day string, amount decimal.Decimal) error {
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &t.table,
		Key:                       key(operator, day),
		UpdateExpression:          aws.String("ADD adjusted :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.Decimal(amount.Neg())},
	})
	if err != nil {
		return fmt.Errorf("give back allowance of %s: %w", operator, err)
	}
	return nil
}

// Taken is the operator's total of day.
func (t *Table) Taken(ctx context.Context, operator, day string) (decimal.Decimal, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.table, Key: key(operator, day), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("read allowance of %s: %w", operator, err)
	}
	n, ok := out.Item["adjusted"].(*types.AttributeValueMemberN)
	if !ok {
		return decimal.Zero, nil
	}
	return decimal.NewFromString(n.Value)
}
