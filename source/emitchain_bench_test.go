package source

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// exprReader is a chained operator evaluating a filter and, when it
// passes, a map encoded to JSON on the record's Doc (as operators' filter
// and map do).
type exprReader struct {
	filter, proj *expression.Program
	env          expression.Env
	buf          []byte
}

func (r *exprReader) Open(context.Context) error { return nil }
func (r *exprReader) ProcessRecord(_ context.Context, _ int, rec runtime.Record) error {
	v, _ := rec.Decoded()
	doc := v.(*expression.Doc)
	r.env.Reset(&expression.Input{Doc: doc})
	if ok, err := r.filter.EvalBool(&r.env); err != nil || !ok || r.proj == nil {
		return err
	}
	r.env.Reset(&expression.Input{Doc: doc})
	var err error
	r.buf, _, _, err = r.proj.EvalJSON(r.buf[:0], &r.env)
	return err
}
func (r *exprReader) EndInput(context.Context) error { return nil }
func (r *exprReader) Close() error                   { return nil }

// BenchmarkEmitChain measures one record through a job's source (the json
// format as Decoder, the shared expression.Doc) and the expressions its
// chain evaluates: nexmark-q0 (the timestamp expression, the filter on
// event_type, the map) on a bid, and the interval-join scenario's
// splitting filter (id % 2 == 0) on an item.
func BenchmarkEmitChain(b *testing.B) {
	bid := []byte(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"channel-5901","url":"https://www.nexmark.com/aaaa/bbbb/item.htm?query=1&channel_id=1153433600","dateTime":1700000000123,"extra":"ccccccccccccccccccccc"}}`)
	item := []byte(`{"id":123456,"key":"k000042","shape":"CIRCLE","amount":317,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	for _, bc := range []struct {
		name, ts, filter, proj string
		value                  []byte
	}{
		{"nexmark-q0", `event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`, `event_type == 2`,
			`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "dateTime": bid.dateTime, "extra": bid.extra}`, bid},
		{"split-filter", "", `id % 2 == 0`, "", item},
	} {
		b.Run(bc.name, func(b *testing.B) {
			compile := func(src string) *expression.Program {
				if src == "" {
					return nil
				}
				p, err := expression.Compile(src)
				if err != nil {
					b.Fatal(err)
				}
				return p
			}
			ch := runtime.NewChannel(1)
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			out.AddChained(&runtime.ChainedOperator{ID: runtime.TaskID{Operator: "r"}, Operator: &exprReader{filter: compile(bc.filter), proj: compile(bc.proj)}})
			cfg := Config{Name: "in", Topic: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Decoder: connector.JSONFormat{},
				Output: out, NewJSONDoc: func() runtime.ReusableJSON { return new(expression.Doc) }}
			if ts := compile(bc.ts); ts != nil {
				var env expression.Env
				cfg.Timestamp = func(rec *runtime.Record) (time.Time, error) {
					v, _ := rec.Decoded()
					env.Reset(&expression.Input{Doc: v.(*expression.Doc)})
					x, err := ts.Eval(&env)
					if err != nil {
						return time.Time{}, err
					}
					return time.UnixMilli(x.(int64)), nil
				}
			}
			s := New(cfg)
			s.wms = newWatermarks(WatermarkConfig{})
			r := &kgo.Record{Topic: "t", Partition: 1, Offset: 7, Key: []byte("k"), Value: bc.value, Timestamp: time.UnixMilli(1)}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.emit(ctx, r); err != nil {
					b.Fatal(err)
				}
				<-ch
			}
		})
	}
}
