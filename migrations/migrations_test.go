package migrations_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/migrations"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestApplyIsIdempotentAndEnablesTheStream(t *testing.T) {
	t.Parallel()
	db := dynamolocal.NewClient(dynamotest.Emulator(t).Endpoint)
	ctx := context.Background()
	for range 2 {
		if err := migrations.Apply(ctx, db, "idem_", quiet); err != nil {
			t.Fatal(err)
		}
	}
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("idem_ledger")})
	if err != nil {
		t.Fatal(err)
	}
	s := out.Table.StreamSpecification
	if s == nil || !aws.ToBool(s.StreamEnabled) || s.StreamViewType != types.StreamViewTypeNewAndOldImages {
		t.Errorf("stream = %+v, want enabled with NEW_AND_OLD_IMAGES", s)
	}
}

func TestApplyRefusesATableWithOtherKeys(t *testing.T) {
	t.Parallel()
	db := dynamolocal.NewClient(dynamotest.Emulator(t).Endpoint)
	ctx := context.Background()
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("other_ledger"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = migrations.Apply(ctx, db, "other_", quiet)
	if err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("Apply over a table with other keys: %v, want an error saying it differs", err)
	}
}

func TestFilesAreCreateTableInputs(t *testing.T) {
	t.Parallel()
	all, err := migrations.All("p_")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || *all[0].Input.TableName != "p_"+migrations.LedgerTable {
		t.Fatalf("migrations = %+v, want the ledger table first, prefixed", all)
	}
	for _, m := range all {
		if len(m.Input.KeySchema) == 0 || m.Input.BillingMode == "" {
			t.Errorf("%s: key schema or billing mode missing; the JSON field names must be CreateTable's", m.File)
		}
	}
}
