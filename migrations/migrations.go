// Package migrations holds the DynamoDB table definitions of pointledger and
// applies them.
//
// Each NNNN_name.json file is a CreateTable input, usable as it is by
// `aws dynamodb create-table --cli-input-json file://migrations/0001_ledger.json`.
// Apply creates every table that does not exist, with the configured prefix
// before its name, waits until it is active, and checks that a table that
// already exists has the keys and stream the file asks for. Running it again
// changes nothing.
package migrations

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

//go:embed *.json
var files embed.FS

// Table names as the migration files write them, before any prefix.
const (
	LedgerTable  = "ledger"  // entries, accounts, request records; streams on
	HistoryTable = "history" // the projection: per-user history and its state
	LeaseTable   = "leases"  // shard leases and checkpoints of the projection
	// WebhookTable holds webhook endpoints, each endpoint's delivery queue
	// per user, delivery rows and expiry notices (internal/dispatch).
	WebhookTable = "webhooks"
)

// API is the part of the DynamoDB client migrations use.
type API interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Migration is one table definition.
type Migration struct {
	File  string
	Input dynamodb.CreateTableInput
}

// All returns the migrations in file order, with prefix before each table name.
func All(prefix string) ([]Migration, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Migration
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var in dynamodb.CreateTableInput
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		if in.TableName == nil {
			return nil, fmt.Errorf("migration %s: no TableName", name)
		}
		in.TableName = aws.String(prefix + *in.TableName)
		out = append(out, Migration{File: name, Input: in})
	}
	return out, nil
}

// Apply creates the tables that do not exist yet and checks those that do.
func Apply(ctx context.Context, db API, prefix string, log *slog.Logger) error {
	all, err := All(prefix)
	if err != nil {
		return err
	}
	return Create(ctx, db, all, log)
}

// Create is Apply for the migrations given, as given: tests use it to make
// tables without their streams (internal/dynamotest).
func Create(ctx context.Context, db API, all []Migration, log *slog.Logger) error {
	for _, m := range all {
		table := *m.Input.TableName
		in := m.Input
		_, err := db.CreateTable(ctx, &in)
		var inUse *types.ResourceInUseException
		switch {
		case errors.As(err, &inUse):
			log.InfoContext(ctx, "table exists", "table", table, "migration", m.File)
		case err != nil:
			return fmt.Errorf("migration %s: create table %s: %w", m.File, table, err)
		default:
			log.InfoContext(ctx, "table created", "table", table, "migration", m.File)
		}
		desc, err := waitActive(ctx, db, table)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.File, err)
		}
		if err := check(m.Input, desc); err != nil {
			return fmt.Errorf("migration %s: table %s exists but differs: %w", m.File, table, err)
		}
	}
	return nil
}

func waitActive(ctx context.Context, db API, table string) (*types.TableDescription, error) {
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			return nil, fmt.Errorf("describe table %s: %w", table, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return out.Table, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for table %s: %w", table, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// check compares what matters to the service: keys and the stream.
func check(want dynamodb.CreateTableInput, got *types.TableDescription) error {
	if !slices.Equal(keys(want.KeySchema), keys(got.KeySchema)) {
		return fmt.Errorf("key schema %v, want %v", keys(got.KeySchema), keys(want.KeySchema))
	}
	if w := want.StreamSpecification; w != nil && aws.ToBool(w.StreamEnabled) {
		g := got.StreamSpecification
		if g == nil || !aws.ToBool(g.StreamEnabled) || g.StreamViewType != w.StreamViewType {
			return fmt.Errorf("stream is not enabled with view type %s", w.StreamViewType)
		}
	}
	return nil
}

func keys(ks []types.KeySchemaElement) []string {
	var out []string
	for _, k := range ks {
		out = append(out, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	return out
}
