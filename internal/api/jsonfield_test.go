package api

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	_ "github.com/pointledger/pointledger/gen/pointledger/v1" // registers the API's files
)

// wrongValue is a JSON value that a field of fd does not take.
func wrongValue(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap(), fd.IsList():
		return `"x"`
	case fd.Message() != nil:
		return "60" // a duration, a time or a message as a number
	}
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "5"
	case protoreflect.BoolKind:
		return `"yes"`
	case protoreflect.EnumKind:
		return "true"
	default:
		return `"soon"`
	}
}

// Every field of every request of the API, sent with a value of the wrong
// JSON type, is refused with a message that names the field and what it
// takes (issue 31: `"ttl":60` answered "unexpected token 60", naming
// neither), and so is an element of a list or a value of a map.
func TestEveryWronglyTypedFieldIsNamed(t *testing.T) {
	t.Parallel()
	fields := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("pointledger.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			methods := fd.Services().Get(i).Methods()
			for j := range methods.Len() {
				md := methods.Get(j).Input()
				for k := range md.Fields().Len() {
					f := md.Fields().Get(k)
					fields++
					body := fmt.Sprintf(`{"%s": %s}`, f.Name(), wrongValue(f))
					msg := dynamicpb.NewMessage(md)
					err := protojson.Unmarshal([]byte(body), msg)
					if err == nil {
						t.Errorf("%s %s: protojson took it", md.FullName(), body)
						continue
					}
					got := describeJSONError(msg, []byte(body), err)
					want := fmt.Sprintf("field %q must be ", f.Name())
					if !strings.Contains(got, want) {
						t.Errorf("%s %s:\n got %s\nwant it to say %s...", md.FullName(), body, got, want)
					}
				}
			}
		}
		return true
	})
	if fields < 50 {
		t.Fatalf("%d fields of requests, want the API's", fields)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"user_id":"a","ttl":60}`, `field "ttl" must be a duration string such as "3600s", not 60 (line 1, column 22)`},
		{`{"ttl":"60"}`, `field "ttl" must be a duration string such as "3600s", not "60"`},
		{`{"expire_time":"tomorrow"}`, `field "expire_time" must be an RFC 3339 time string in UTC such as "2026-01-02T15:04:05Z", not "tomorrow"`},
		{`{"metadata":{"note":1}}`, `field "metadata" must be an object of strings, not 1`},
		{"{\n  \"user_id\": \"a\",\n  \"ttl\": [1]\n}", `field "ttl" must be a duration string such as "3600s", not [ (line 3, column 10)`},
	} {
		md, err := protoregistry.GlobalFiles.FindDescriptorByName("pointledger.v1.GrantRequest")
		if err != nil {
			t.Fatal(err)
		}
		msg := dynamicpb.NewMessage(md.(protoreflect.MessageDescriptor))
		perr := protojson.Unmarshal([]byte(tc.body), msg)
		if got := describeJSONError(msg, []byte(tc.body), perr); !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n got %s\nwant it to say %s", tc.body, got, tc.want)
		}
	}
}
