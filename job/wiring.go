package job

import (
	"fmt"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// KeyedExchange carries the records of a key-group hash edge from every
// upstream subtask to the downstream subtask owning each record's key group
// (Flink's keyBy shuffle). The in-process exchange uses bounded channels;
// in cluster mode a Kafka repartition topic takes its place, so this is the
// one seam between keyed stages.
type KeyedExchange interface {
	// Connect adds, to every output in upstream, a writer that selects the
	// key with e.Key and routes by key group over maxParallelism key
	// groups, and returns, per downstream subtask (len downstream), the
	// channels it reads.
	Connect(e graph.Edge, upstream []*runtime.Output, downstream, maxParallelism int) [][]runtime.Channel
}

// InProcessExchange is the KeyedExchange of one process: one bounded
// channel per (upstream, downstream) subtask pair.
type InProcessExchange struct{}

// Connect implements KeyedExchange.
func (InProcessExchange) Connect(e graph.Edge, upstream []*runtime.Output, downstream, maxParallelism int) [][]runtime.Channel {
	out := make([][]runtime.Channel, downstream)
	for _, o := range upstream {
		chans := make([]runtime.Channel, downstream)
		for d := range chans {
			chans[d] = runtime.NewChannel(runtime.BatchChannelCapacity)
			out[d] = append(out[d], chans[d])
		}
		addWriter(o, e, runtime.NewWriter(chans, runtime.KeyGroupPartitioner{MaxParallelism: maxParallelism}).WithKeySelector(e.Key).WithBatching(runtime.RecordBatchSize))
	}
	return out
}

// addWriter adds w to o's main output, or to the side output e reads.
func addWriter(o *runtime.Output, e graph.Edge, w *runtime.Writer) {
	if e.Output != "" {
		o.AddSideWriter(e.Output, w)
		return
	}
	o.AddWriter(w)
}

// builder wires the subtasks of a graph.
type builder struct {
	g        *graph.Graph
	maxP     int
	outputs  map[string][]*runtime.Output        // vertex -> per subtask
	gates    map[string][][]runtime.InputChannel // vertex -> per subtask input channels
	exchange KeyedExchange
	// heads maps each chained operator (graph.Graph.Chained) to the
	// operator heading its chain, whose task runs it; ups to the
	// operator it is chained to.
	heads, ups map[string]string
}

// head returns the operator heading the chain vertex is in (vertex itself
// when it is not chained).
func (b *builder) head(vertex string) string {
	if h, ok := b.heads[vertex]; ok {
		return h
	}
	return vertex
}

// stage creates the outputs of a vertex with p subtasks and its empty gates.
func (b *builder) stage(name string, p int, rm *runtime.Metrics) {
	outs := make([]*runtime.Output, p)
	for i := range outs {
		outs[i] = runtime.NewOutput(rm.RecordsOut(name, i))
		outs[i].SetBackPressure(rm.BackPressure(name, i))
	}
	b.outputs[name] = outs
	b.gates[name] = make([][]runtime.InputChannel, p)
}

// wire connects the subtasks of edge e.
func (b *builder) wire(e graph.Edge) error {
	ups, down := b.outputs[e.From], b.gates[e.To]
	if ups == nil || down == nil {
		return fmt.Errorf("job: edge %s: unknown vertex", e)
	}
	if b.g.Chained(e) {
		// No channel: the downstream operator is chained to the upstream
		// one's output when it is built (build.buildOperators).
		if b.heads == nil {
			b.heads, b.ups = map[string]string{}, map[string]string{}
		}
		b.heads[e.To], b.ups[e.To] = b.head(e.From), e.From
		return nil
	}
	switch e.Kind {
	case graph.Hash:
		for d, chans := range b.exchange.Connect(e, ups, len(down), b.maxP) {
			for _, ch := range chans {
				down[d] = append(down[d], runtime.InputChannel{Ch: ch, Input: e.Input})
			}
		}
	case graph.Forward:
		if len(ups) != len(down) {
			return fmt.Errorf("job: edge %s: forward between parallelism %d and %d", e, len(ups), len(down))
		}
		for i, o := range ups {
			ch := runtime.NewChannel(runtime.BatchChannelCapacity)
			down[i] = append(down[i], runtime.InputChannel{Ch: ch, Input: e.Input})
			addWriter(o, e, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}).WithBatching(runtime.RecordBatchSize))
		}
	case graph.Broadcast, graph.Rebalance:
		for _, o := range ups {
			chans := make([]runtime.Channel, len(down))
			for d := range chans {
				chans[d] = runtime.NewChannel(runtime.BatchChannelCapacity)
				down[d] = append(down[d], runtime.InputChannel{Ch: chans[d], Input: e.Input})
			}
			var p runtime.Partitioner = runtime.BroadcastPartitioner{}
			if e.Kind == graph.Rebalance {
				p = &runtime.RebalancePartitioner{} // each upstream subtask keeps its own round-robin position
			}
			addWriter(o, e, runtime.NewWriter(chans, p).WithBatching(runtime.RecordBatchSize))
		}
	default:
		return fmt.Errorf("job: edge %s: unknown kind", e)
	}
	return nil
}
