package checkpoint

import (
	"encoding/json"
	"fmt"
)

// CommittablesState is the operator list state (even split) in which a
// two-phase-commit sink (and a dead-letter writer) keeps its
// pre-committed transactions from metadata version 3 on: each entry is a
// committable envelope, JSON {"sink": type, "data": bytes}
// (EncodeCommittable), whose data only the sink type reads.
const CommittablesState = "sink-committables"

// LegacyKafkaCommittables is the state holding the committables of
// metadata versions 1 and 2: each entry is one Kafka committable's JSON
// (sink.Committable), of sink type LegacyCommittableSink.
const LegacyKafkaCommittables = "kafka-sink-committables"

// LegacyCommittableSink is the sink type of LegacyKafkaCommittables
// entries.
const LegacyCommittableSink = "kafka"

// Committable is one decoded committable envelope: the sink type that
// wrote it and its bytes.
type Committable struct {
	Sink string `json:"sink"`
	Data []byte `json:"data"`
}

// EncodeCommittable returns the CommittablesState entry of data, a
// committable of sink type sink.
func EncodeCommittable(sink string, data []byte) ([]byte, error) {
	return json.Marshal(Committable{Sink: sink, Data: data})
}

// DecodeCommittables returns every committable ts holds: the envelopes of
// CommittablesState, then the entries of LegacyKafkaCommittables (as
// sink LegacyCommittableSink). An entry that does not decode is an error
// naming it.
func DecodeCommittables(ts TaskState) ([]Committable, error) {
	var out []Committable
	for _, e := range ts.Operator[CommittablesState].Entries {
		var c Committable
		if err := json.Unmarshal(e, &c); err != nil || c.Sink == "" {
			return nil, fmt.Errorf("checkpoint: committable %q: not an envelope {\"sink\", \"data\"}: %v", e, err)
		}
		out = append(out, c)
	}
	for _, e := range ts.Operator[LegacyKafkaCommittables].Entries {
		out = append(out, Committable{Sink: LegacyCommittableSink, Data: e})
	}
	return out, nil
}
