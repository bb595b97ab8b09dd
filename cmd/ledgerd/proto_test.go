package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The google/rpc/error_details.proto shipped in proto/ (for clients in
// other languages, and buf curl) says what Go's errdetails, googleapis' own,
// says of ErrorInfo: the same package, options, fields and numbers, so that
// what ledgerd sends decodes the same everywhere.
func TestShippedErrorInfoIsGoogleapis(t *testing.T) {
	t.Parallel()
	buf, err := filepath.Abs("../../.cache/bin/buf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(buf); err != nil {
		t.Fatalf("buf: %v (make tools installs it)", err)
	}
	image := filepath.Join(t.TempDir(), "image.binpb")
	build := exec.Command(buf, "build", "--path", "google/rpc/error_details.proto", "-o", image)
	build.Dir = "../../proto"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("buf build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	var shipped *descriptorpb.FileDescriptorProto
	for _, f := range set.GetFile() {
		if f.GetName() == "google/rpc/error_details.proto" {
			shipped = f
		}
	}
	if shipped == nil {
		t.Fatal("buf build made no google/rpc/error_details.proto")
	}
	googleapis := protodesc.ToFileDescriptorProto(errdetails.File_google_rpc_error_details_proto)
	if shipped.GetPackage() != googleapis.GetPackage() || shipped.GetSyntax() != googleapis.GetSyntax() {
		t.Errorf("shipped package %q (%s), googleapis' %q (%s)", shipped.GetPackage(), shipped.GetSyntax(), googleapis.GetPackage(), googleapis.GetSyntax())
	}
	if !proto.Equal(googleapis.GetOptions(), shipped.GetOptions()) {
		t.Errorf("file options: shipped\n%v\ngoogleapis'\n%v", shipped.GetOptions(), googleapis.GetOptions())
	}
	if len(shipped.GetMessageType()) != 1 {
		t.Errorf("shipped messages: %d, want ErrorInfo alone", len(shipped.GetMessageType()))
	}
	want := protodesc.ToDescriptorProto((&errdetails.ErrorInfo{}).ProtoReflect().Descriptor())
	if got := shipped.GetMessageType()[0]; !proto.Equal(got, want) {
		t.Errorf("ErrorInfo: shipped\n%v\ngoogleapis'\n%v", prototext.Format(got), prototext.Format(want))
	}
}
