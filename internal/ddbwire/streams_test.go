package ddbwire_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/pointledger/pointledger/internal/ddbwire"
)

// streamsClient is a streams client answered by r, the lean way or the
// SDK's.
func streamsClient(r *recorder, lean bool) *dynamodbstreams.Client {
	opts := []func(*dynamodbstreams.Options){}
	if lean {
		opts = append(opts, ddbwire.LeanGetRecords)
	}
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
		HTTPClient:  r,
	}, opts...)
}

// getRecordsBoth is GetRecords answered with answer (status 200 unless
// given), read by the SDK and by LeanGetRecords.
func getRecordsBoth(t *testing.T, status int, answer string) (sdk, lean *dynamodbstreams.GetRecordsOutput, sdkErr, leanErr error) {
	t.Helper()
	in := &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("iter")}
	sdk, sdkErr = streamsClient(&recorder{status: status, answer: answer}, false).GetRecords(context.Background(), in)
	lean, leanErr = streamsClient(&recorder{status: status, answer: answer}, true).GetRecords(context.Background(), in)
	for _, out := range []*dynamodbstreams.GetRecordsOutput{sdk, lean} {
		if out != nil {
			out.ResultMetadata = middleware.Metadata{}
		}
	}
	return sdk, lean, sdkErr, leanErr
}

// A GetRecords answer with every field of a record and every kind of
// attribute value is read by DecodeGetRecords as the SDK reads it.
func TestGetRecordsMatchesSDK(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"every field": `{"NextShardIterator":"next\u002fone","Records":[
		  {"awsRegion":"ddblocal","eventID":"e1","eventName":"INSERT","eventSource":"aws:dynamodb","eventVersion":"1.1",
		   "userIdentity":{"PrincipalId":"dynamodb.amazonaws.com","Type":"Service"},"unknownField":{"x":[1,2,{"y":null}]},
		   "dynamodb":{"ApproximateCreationDateTime":1.764316e9,"SizeBytes":321,"StreamViewType":"NEW_AND_OLD_IMAGES","SequenceNumber":"000001",
		     "Keys":{"PK":{"S":"U#alice"},"SK":{"S":"E#00000000000000000001"}},
		     "NewImage":{"s":{"S":"t\u00e9xt \"q\" \\ \n"},"n":{"N":"-12.5e3"},"b":{"B":"AAEC/w=="},"t":{"BOOL":true},"f":{"BOOL":false},"z":{"NULL":true},
		       "m":{"M":{"inner":{"L":[{"S":"a"},{"N":"1"},{"M":{}},{"L":[]}]}}},"ss":{"SS":["x","y"]},"ns":{"NS":["1","2.5"]},"bs":{"BS":["AA==","AQI="]},
		       "empty":{"S":""},"el":{"L":[]},"em":{"M":{}}},
		     "OldImage":{"v":{"N":"1"}}}},
		  {"eventName":"MODIFY","dynamodb":{"ApproximateCreationDateTime":1764316123.456,"Keys":{"PK":{"S":"U#bob"}}}},
		  {"eventName":"REMOVE","eventID":"e3"}
		]}`,
		"no records":       `{"NextShardIterator":"n","Records":[]}`,
		"the shard's end":  `{"Records":[{"eventName":"INSERT"}]}`,
		"spaced":           " {\n \"Records\" : [ { \"eventName\" : \"INSERT\" , \"dynamodb\" : { \"SizeBytes\" : 7 } } ] ,\n \"NextShardIterator\" : \"n\" } \n",
		"empty":            ``,
		"an unknown field": `{"Future":{"a":[true,false,null,-1.5e-3]},"Records":[]}`,
	}
	for name, answer := range answers {
		sdk, lean, sdkErr, leanErr := getRecordsBoth(t, 0, answer)
		if sdkErr != nil || leanErr != nil {
			t.Fatalf("%s: SDK %v, lean %v", name, sdkErr, leanErr)
		}
		if !reflect.DeepEqual(sdk, lean) {
			t.Errorf("%s: lean read\n%#v\nthe SDK\n%#v", name, lean, sdk)
		}
		var out dynamodbstreams.GetRecordsOutput
		if err := ddbwire.DecodeGetRecords([]byte(answer), &out); err != nil {
			t.Errorf("%s: DecodeGetRecords: %v (it went to the SDK)", name, err)
		}
	}
	// What DecodeGetRecords does not read goes to the SDK, which reads it
	// as it always did.
	for name, answer := range map[string]string{
		"an attribute of an unknown kind": `{"Records":[{"dynamodb":{"NewImage":{"x":{"Q":"1"}}}}]}`,
		"a null":                          `{"NextShardIterator":null,"Records":[]}`,
	} {
		var out dynamodbstreams.GetRecordsOutput
		if err := ddbwire.DecodeGetRecords([]byte(answer), &out); err == nil {
			t.Errorf("%s: DecodeGetRecords read it: %+v", name, out)
		}
		sdk, lean, sdkErr, leanErr := getRecordsBoth(t, 0, answer)
		if !reflect.DeepEqual(sdk, lean) || (sdkErr == nil) != (leanErr == nil) {
			t.Errorf("%s: lean %#v, %v; the SDK %#v, %v", name, lean, leanErr, sdk, sdkErr)
		}
	}
}

// An error answer is the SDK's error, typed.
func TestGetRecordsErrorsAreTheSDKs(t *testing.T) {
	t.Parallel()
	_, _, sdkErr, leanErr := getRecordsBoth(t, 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ExpiredIteratorException","message":"Iterator expired"}`)
	var expired *types.ExpiredIteratorException
	if !errors.As(leanErr, &expired) || sdkErr == nil || sdkErr.Error() != leanErr.Error() {
		t.Errorf("lean error %v, want the SDK's %v (an ExpiredIteratorException)", leanErr, sdkErr)
	}
	_, _, sdkErr, leanErr = getRecordsBoth(t, 200, `{"Records":[`)
	if sdkErr == nil || leanErr == nil || !strings.Contains(leanErr.Error(), "deserialization failed") && sdkErr.Error() != leanErr.Error() {
		t.Errorf("a truncated answer: lean %v, SDK %v; want the SDK's error both ways", leanErr, sdkErr)
	}
}

// KeepImagesOf leaves out the images of the records whose keys it
// refuses, reads the others as the SDK does, and changes nothing for a
// client made without LeanGetRecords.
func TestKeepImagesOfLeavesOutTheImagesRefused(t *testing.T) {
	t.Parallel()
	answer := `{"NextShardIterator":"n","Records":[
	  {"eventName":"INSERT","dynamodb":{"Keys":{"SK":{"S":"keep"}},"NewImage":{"SK":{"S":"keep"},"a":{"N":"1"}},"SequenceNumber":"1"}},
	  {"eventName":"MODIFY","dynamodb":{"Keys":{"SK":{"S":"drop"}},"NewImage":{"SK":{"S":"drop"},"m":{"M":{"x":{"L":[{"S":"y"}]}}}},"OldImage":{"SK":{"S":"drop"}},"SequenceNumber":"2"}},
	  {"eventName":"INSERT","dynamodb":{"NewImage":{"SK":{"S":"drop"}},"Keys":{"SK":{"S":"drop"}},"SequenceNumber":"3"}}
	]}`
	keep := ddbwire.KeepImagesOf(func(keys map[string]types.AttributeValue) bool {
		sk, _ := keys["SK"].(*types.AttributeValueMemberS)
		return sk != nil && sk.Value == "keep"
	})
	in := &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("iter")}
	sdk, err := streamsClient(&recorder{answer: answer}, false).GetRecords(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	sdkKeeping, err := streamsClient(&recorder{answer: answer}, false).GetRecords(context.Background(), in, keep)
	if err != nil {
		t.Fatal(err)
	}
	lean, err := streamsClient(&recorder{answer: answer}, true).GetRecords(context.Background(), in, keep)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sdk.Records, sdkKeeping.Records) {
		t.Errorf("KeepImagesOf changed what the SDK's client reads: %+v", sdkKeeping.Records)
	}
	if len(lean.Records) != 3 || !reflect.DeepEqual(lean.Records[0], sdk.Records[0]) {
		t.Fatalf("lean records %+v, want 3, the first as the SDK reads it", lean.Records)
	}
	dropped := lean.Records[1]
	if dropped.Dynamodb.NewImage != nil || dropped.Dynamodb.OldImage != nil || !reflect.DeepEqual(dropped.Dynamodb.Keys, sdk.Records[1].Dynamodb.Keys) ||
		*dropped.Dynamodb.SequenceNumber != "2" || dropped.EventName != types.OperationTypeModify {
		t.Errorf("a refused record = %+v, want its keys, name and sequence number, no images", dropped.Dynamodb)
	}
	if !reflect.DeepEqual(lean.Records[2], sdk.Records[2]) {
		t.Errorf("a record whose images come before its keys = %+v, want it whole", lean.Records[2].Dynamodb)
	}
}
