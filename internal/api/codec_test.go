package api

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// The proto codec's MarshalAppend (which Connect uses for answers) appends
// what Marshal writes, and refuses what is not a message as Marshal does.
func TestProtoCodecMarshalAppend(t *testing.T) {
	t.Parallel()
	msg := &pb.PurchaseResponse{Balance: "99", Entry: &pb.Entry{UserId: "u1", Amount: "-1"}}
	want, err := protoCodec{}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := protoCodec{}.MarshalAppend([]byte("prefix"), msg)
	if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Errorf("MarshalAppend = %q, %v; want prefix and %q", got, err, want)
	}
	var back pb.PurchaseResponse
	if err := proto.Unmarshal(got[len("prefix"):], &back); err != nil || !proto.Equal(&back, msg) {
		t.Errorf("read back %v, %v", &back, err)
	}
	if _, err := (protoCodec{}).MarshalAppend(nil, "not a message"); err == nil {
		t.Error("MarshalAppend of a string: no error")
	}
}
