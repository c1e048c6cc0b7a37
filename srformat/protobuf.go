package srformat

import (
	"context"
	"errors"
	"fmt"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoSchemaFile is the name the registry's schema text is compiled under;
// its references are compiled under their reference names.
const protoSchemaFile = "kstreamd-schema.proto"

// The JSON shape of a Protobuf value is the proto3 JSON mapping
// (google.golang.org/protobuf/encoding/protojson) with the .proto field
// names and every field present (defaults included): nested messages are
// objects, repeated fields arrays, maps objects, enums their value names,
// 64-bit integers strings (the mapping's rule, exact), bytes base64, and
// the well-known types their JSON forms (Timestamp an RFC 3339 string).
// Encoding accepts both the .proto and the lowerCamel field names and
// drops fields the message does not have.
type protoCodec struct {
	file  protoreflect.FileDescriptor
	msg   protoreflect.MessageDescriptor // the Encoder's message
	idx   []int                          // its message index path
	marsh protojson.MarshalOptions
	unm   protojson.UnmarshalOptions
}

func compileProtobuf(text string, refs map[string]string, msgName string) (*protoCodec, error) {
	files := map[string]string{protoSchemaFile: text}
	for name, src := range refs {
		files[name] = src
	}
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(files)}),
	}
	out, err := comp.Compile(context.Background(), protoSchemaFile)
	if err != nil {
		return nil, err
	}
	fd := out[0]
	if fd.Messages().Len() == 0 {
		return nil, errors.New("the schema defines no message")
	}
	c := &protoCodec{
		file:  fd,
		marsh: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		unm:   protojson.UnmarshalOptions{DiscardUnknown: true},
	}
	if msgName == "" {
		c.msg, c.idx = fd.Messages().Get(0), []int{0}
		return c, nil
	}
	var find func(ms protoreflect.MessageDescriptors, path []int) bool
	find = func(ms protoreflect.MessageDescriptors, path []int) bool {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			p := append(append([]int(nil), path...), i)
			if string(m.FullName()) == msgName {
				c.msg, c.idx = m, p
				return true
			}
			if find(m.Messages(), p) {
				return true
			}
		}
		return false
	}
	if !find(fd.Messages(), nil) {
		return nil, fmt.Errorf("the schema has no message %s", msgName)
	}
	return c, nil
}

func (c *protoCodec) index() []int { return c.idx }

// message returns the message the index path names.
func (c *protoCodec) message(index []int) (protoreflect.MessageDescriptor, error) {
	if len(index) == 0 {
		index = []int{0}
	}
	ms := c.file.Messages()
	var m protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= ms.Len() {
			return nil, fmt.Errorf("message index %v names no message of the schema", index)
		}
		m = ms.Get(i)
		ms = m.Messages()
	}
	return m, nil
}

func (c *protoCodec) decode(dst, b []byte, index []int) ([]byte, error) {
	md, err := c.message(index)
	if err != nil {
		return dst, err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		return dst, fmt.Errorf("%s: %w", md.FullName(), err)
	}
	return c.marsh.MarshalAppend(dst, m)
}

func (c *protoCodec) encode(dst, v []byte) ([]byte, error) {
	m := dynamicpb.NewMessage(c.msg)
	if err := c.unm.Unmarshal(v, m); err != nil {
		return dst, fmt.Errorf("%s: %w", c.msg.FullName(), err)
	}
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
}
