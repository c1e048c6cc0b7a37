package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hamba/avro/v2"
	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kstreamd/kstreamd/internal/embedded"
)

// The avro-copy scenario: the items' values are Avro in the Confluent wire
// format (magic byte 0, the schema id as 4 big-endian bytes, the Avro
// body), with avroInSchema registered under "<in>-value" in an embedded
// schema registry (franz-go's srfake, internal/embedded) the run starts;
// the job reads them with format avro (each value decoded into JSON with
// the schema of its id) and writes them with format avro under the
// subject "<out>-value", where the run registered avroOutSchema (the same
// fields in another record, so a distinct id) before the job starts. The
// run decodes every committed output independently of the job's codec
// (hamba/avro; the job's is srformat's, over twmb/avro), checks that it is
// framed with the output subject's id, and compares the values with the
// items' as a multiset, as the Nexmark scenarios are checked.
const (
	avroInSchema = `{"type":"record","name":"Item","namespace":"bench","fields":[
  {"name":"id","type":"long"},{"name":"key","type":"string"},{"name":"shape","type":"string"},
  {"name":"amount","type":"long"},{"name":"note","type":"string"}]}`
	avroOutSchema = `{"type":"record","name":"ItemCopy","namespace":"bench","fields":[
  {"name":"id","type":"long"},{"name":"key","type":"string"},{"name":"shape","type":"string"},
  {"name":"amount","type":"long"},{"name":"note","type":"string"}]}`
)

// avroItem is an item as the avro-copy scenario's schemas hold it.
type avroItem struct {
	ID     int64  `avro:"id" json:"id"`
	Key    string `avro:"key" json:"key"`
	Shape  string `avro:"shape" json:"shape"`
	Amount int64  `avro:"amount" json:"amount"`
	Note   string `avro:"note" json:"note"`
}

// avroItemOf returns it's fields, the note as in its JSON value (Item.Value).
func avroItemOf(it Item) avroItem {
	note := gjson.GetBytes(it.Value(make([]byte, 0, valueBytes+8)), "note").String()
	return avroItem{ID: it.ID, Key: it.Key, Shape: it.Shape, Amount: int64(it.Amount), Note: note}
}

// avroCopy is the avro-copy scenario: no operator, Avro in and out.
func avroCopy() Scenario {
	return Scenario{
		Name: "avro-copy", Doc: "source to sink, no operator, Avro in and out (Confluent wire format, embedded schema registry): each value decoded into JSON and encoded again under the sink's subject", Backend: "hashmap",
		Avro:     true,
		NewModel: func(int) Model { return newValueCheck(avroCopyModel{}) },
	}
}

// avroCopyModel is the avro-copy scenario's value model: each item is
// copied, its value unchanged.
type avroCopyModel struct{}

// Values implements valueModel.
func (avroCopyModel) Values(it Item) []any { return []any{avroItemOf(it)} }

// avroRun is what one avro-copy run shares: the embedded registry, the
// schema ids registered and the codecs of the run's own (independent)
// encoding and decoding.
type avroRun struct {
	reg          *embedded.SchemaRegistry
	inID, outID  int
	inSc, outSch avro.Schema
}

// startAvroRun starts an embedded schema registry on a free loopback port
// and registers avroInSchema under "<in>-value" and avroOutSchema under
// "<out>-value". Close it with close.
func startAvroRun(ctx context.Context, logger *slog.Logger, in, out string) (*avroRun, error) {
	reg, err := embedded.StartSchemaRegistry(logger, "127.0.0.1:0", "")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	a := &avroRun{reg: reg}
	fail := func(err error) (*avroRun, error) { _ = reg.Close(); return nil, fmt.Errorf("bench: avro: %w", err) }
	if a.inSc, err = avro.Parse(avroInSchema); err != nil {
		return fail(err)
	}
	if a.outSch, err = avro.Parse(avroOutSchema); err != nil {
		return fail(err)
	}
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		return fail(err)
	}
	for _, s := range []struct {
		subject, schema string
		id              *int
	}{{in + "-value", avroInSchema, &a.inID}, {out + "-value", avroOutSchema, &a.outID}} {
		ss, err := cl.CreateSchema(ctx, s.subject, sr.Schema{Schema: s.schema, Type: sr.TypeAvro})
		if err != nil {
			return fail(fmt.Errorf("register %s: %w", s.subject, err))
		}
		*s.id = ss.ID
	}
	if a.inID == a.outID {
		return fail(fmt.Errorf("the input and output schemas got one id, %d", a.inID))
	}
	return a, nil
}

func (a *avroRun) close() error { return a.reg.Close() }

// url is the registry's base URL.
func (a *avroRun) url() string { return a.reg.URL() }

// record returns it's record for topic with its value in Avro, framed
// with the input schema's id.
func (a *avroRun) record(it Item, topic string) *kgo.Record {
	r := it.record(topic)
	v, err := avro.Marshal(a.inSc, avroItemOf(it))
	if err != nil {
		panic(fmt.Sprintf("bench: avro item %+v: %v", it, err)) // the struct fits the schema
	}
	r.Value = append(confluentHeader(make([]byte, 0, len(v)+5), a.inID), v...)
	return r
}

// decode returns the JSON of an output value: framed with the output
// schema's id, its body decoded with avroOutSchema by hamba/avro.
func (a *avroRun) decode(v []byte) ([]byte, error) {
	if len(v) < 5 || v[0] != 0 {
		return nil, errors.New("not in the Confluent wire format")
	}
	if id := int(binary.BigEndian.Uint32(v[1:5])); id != a.outID {
		return nil, fmt.Errorf("schema id %d, want the output subject's %d", id, a.outID)
	}
	var it avroItem
	if err := avro.Unmarshal(a.outSch, v[5:], &it); err != nil {
		return nil, err
	}
	// Unmarshal may leave bytes unread: the body must be exactly the
	// encoding of what it decoded to.
	if again, err := avro.Marshal(a.outSch, it); err != nil || string(again) != string(v[5:]) {
		return nil, fmt.Errorf("the body (%d bytes) is not the encoding of %+v alone", len(v)-5, it)
	}
	return json.Marshal(it)
}

// avroItems is an itemSource whose items' values are Avro (a.record).
type avroItems struct {
	itemSource
	a *avroRun
}

func (s avroItems) nextItem(partitions int) Item {
	it := s.itemSource.nextItem(partitions)
	it.avro = s.a
	return it
}

// confluentHeader appends the Confluent wire format's header of schema id
// to b: magic byte 0, then the id, 4 bytes big-endian.
func confluentHeader(b []byte, id int) []byte {
	return binary.BigEndian.AppendUint32(append(b, 0), uint32(id))
}
