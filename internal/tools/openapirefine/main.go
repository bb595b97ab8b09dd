// Command openapirefine rewrites, in place, the OpenAPI description that
// protoc-gen-connect-openapi writes (`make generate` runs it after buf), to
// say what ledgerd does where the plugin has no option for it:
//
//   - an answer's field that ledgerd always sends is `required`: its codec
//     writes every field without presence (protojson's EmitDefaultValues), so
//     only message fields (an unset expire_time) and oneof members may be
//     absent. Requests get no `required`: a client leaves out what it likes.
//   - the Connect-Protocol-Version header is optional: ledgerd answers
//     without it (connect-go requires it only when a handler asks to).
//   - the GET form's `message` is required (connect-go refuses a GET without
//     it) and says that it is the request as JSON.
//
// The protos come from the generated code's registered descriptors, so run
// it after gen/ is generated. Its output depends on the file and the
// descriptors alone, so that `make generate-check` can compare.
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/pb33f/libopenapi"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/pointledger/pointledger/gen/pointledger/v1" // registers the API's descriptors
)

// apiPackage is the proto package the description is generated from.
const apiPackage = "pointledger.v1"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openapirefine FILE.openapi.yaml (rewritten in place)")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "openapirefine:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	if err := requireAnswerFields(&model.Model); err != nil {
		return err
	}
	refineParameters(&model.Model)
	// The plugin renders with the same call: what this does not touch stays
	// byte for byte as the plugin wrote it.
	return os.WriteFile(path, model.Model.RenderWithIndention(2), 0o644)
}

// requireAnswerFields marks, in the schema of every message an answer
// carries, the fields ledgerd always sends as required.
func requireAnswerFields(spec *v3.Document) error {
	answers, requests := messagesOfMethods()
	var errs []error
	for _, md := range answers {
		if slices.Contains(requests, md) {
			// One schema cannot require a field of answers and not of
			// requests: give the message two names in the protos.
			errs = append(errs, fmt.Errorf("%s is in both requests and answers", md.FullName()))
			continue
		}
		proxy, ok := spec.Components.Schemas.Get(string(md.FullName()))
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no schema", md.FullName()))
			continue
		}
		s := proxy.Schema()
		for _, name := range alwaysSent(md) {
			if s.Properties == nil || s.Properties.GetOrZero(name) == nil {
				errs = append(errs, fmt.Errorf("%s.%s: no property", md.FullName(), name))
				continue
			}
			if !slices.Contains(s.Required, name) {
				s.Required = append(s.Required, name)
			}
		}
	}
	return errors.Join(errs...)
}

// alwaysSent are the names of md's fields that ledgerd's JSON always has,
// in declaration order: every field without presence. A message field (a
// timestamp, a duration), a oneof's member or an `optional` one is left out
// when it is not set.
func alwaysSent(md protoreflect.MessageDescriptor) []string {
	var names []string
	for i := range md.Fields().Len() {
		if f := md.Fields().Get(i); !f.HasPresence() {
			names = append(names, string(f.Name()))
		}
	}
	return names
}

// messagesOfMethods are the API's messages that answers carry and those that
// requests carry, each with the messages of its fields, in a stable order.
// Messages of other packages (google.protobuf's Timestamp, say) have JSON
// of their own and are left out.
func messagesOfMethods() (answers, requests []protoreflect.MessageDescriptor) {
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			methods := fd.Services().Get(i).Methods()
			for j := range methods.Len() {
				answers = addReachable(answers, methods.Get(j).Output())
				requests = addReachable(requests, methods.Get(j).Input())
			}
		}
		return true
	})
	return answers, requests
}

func addReachable(seen []protoreflect.MessageDescriptor, md protoreflect.MessageDescriptor) []protoreflect.MessageDescriptor {
	if md.ParentFile().Package() != apiPackage || slices.Contains(seen, md) {
		return seen
	}
	if !md.IsMapEntry() {
		seen = append(seen, md)
	}
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		if f.IsMap() {
			f = f.MapValue()
		}
		if f.Message() != nil {
			seen = addReachable(seen, f.Message())
		}
	}
	return seen
}

// refineParameters makes every operation's Connect-Protocol-Version header
// optional and the GET form's message required, each with what it is.
func refineParameters(spec *v3.Document) {
	for _, item := range spec.Paths.PathItems.FromOldest() {
		for _, op := range item.GetOperations().FromOldest() {
			for _, p := range op.Parameters {
				switch {
				case p.In == "header" && p.Name == "Connect-Protocol-Version":
					p.Required = nil
					p.Description = "The Connect protocol's version, 1: Connect's clients send it, ledgerd does not require it."
				case p.In == "query" && p.Name == "message":
					required := true
					p.Required = &required
					p.Description = "The request as JSON text (its schema under content), URL-encoded as any query value: `message=%7B%22user_id%22%3A%22alice%22%7D` is `{\"user_id\":\"alice\"}`."
				}
			}
		}
	}
}
