package source

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A source subtask keys its per-partition state (positions, watermarks,
// lookups, availability) by a partition id: the topic's index among the
// topics the subtask has seen (in the order it saw them) shifted left by
// partitionBits, or'ed with the partition. The first topic's ids are its
// partition numbers, so a single-topic source keys by partition as it
// always did; the ids never leave the subtask (checkpoints hold the topic
// and partition, Split).
const partitionBits = 20

// maxPartition bounds the partitions of one topic a source reads
// (2^20 = 1,048,576; Kafka clusters hold far fewer partitions in all).
const maxPartition = 1<<partitionBits - 1

// pid returns the partition id of partition p of topic, registering topic
// when it is new.
func (s *KafkaSource) pid(topic string, p int32) int32 {
	if len(s.topicNames) > 0 && s.topicNames[0] == topic {
		return p
	}
	if s.topicIdx == nil {
		s.topicIdx = map[string]int32{}
	}
	i, ok := s.topicIdx[topic]
	if !ok {
		i = int32(len(s.topicNames))
		s.topicNames = append(s.topicNames, topic)
		s.topicIdx[topic] = i
	}
	return i<<partitionBits | p
}

// ownTopic reports whether topic is one the subtask has registered.
func (s *KafkaSource) ownTopic(topic string) bool {
	_, ok := s.topicIdx[topic]
	return ok
}

// tp returns the topic and partition of partition id id.
func (s *KafkaSource) tp(id int32) (string, int32) {
	if len(s.topicNames) == 0 { // a subtask made without New reads Topic
		return s.cfg.Topic, id & maxPartition
	}
	return s.topicNames[id>>partitionBits], id & maxPartition
}

// byTopic groups partition ids by topic, as franz-go's consume, pause and
// resume calls take them.
func byTopic[V any](s *KafkaSource, m map[int32]V) map[string]map[int32]V {
	out := map[string]map[int32]V{}
	for id, v := range m {
		t, p := s.tp(id)
		if out[t] == nil {
			out[t] = map[int32]V{}
		}
		out[t][p] = v
	}
	return out
}

// tpName returns "topic/partition" of partition id id, for logs and
// readiness details.
func (s *KafkaSource) tpName(id int32) string {
	t, p := s.tp(id)
	return t + "/" + strconv.Itoa(int(p))
}

// tpNames returns tpName of each of ids.
func (s *KafkaSource) tpNames(ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.tpName(id)
	}
	return out
}

// startTopics returns the topics the subtask reads at start with their
// partition counts: Config.TopicPartitions, or Config.Topic with
// Config.Partitions.
func (c *Config) startTopics() map[string]int32 {
	if c.TopicPartitions != nil {
		return c.TopicPartitions
	}
	return map[string]int32{c.Topic: c.Partitions}
}

// CompileTopicPattern compiles a topic pattern (Go's RE2 syntax) to match
// whole topic names (Flink's KafkaSource topic pattern, a Java
// Pattern.matcher(topic).matches()).
func CompileTopicPattern(pattern string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, err // the error quotes the pattern as written
	}
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// MatchTopics returns the topics of names that pattern (from
// CompileTopicPattern) matches; internal topics (starting with "__") are
// never matched.
func MatchTopics(pattern *regexp.Regexp, names []string) []string {
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, "__") && pattern.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

// discoverRequest returns the metadata request discovery sends: every
// topic of the cluster with a TopicPattern, else the topics read.
func (s *KafkaSource) discoverRequest() *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	if s.cfg.TopicPattern != nil {
		return req // nil Topics: all topics
	}
	for t := range s.cfg.startTopics() {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// discover looks for partitions added to the topics read and, with a
// TopicPattern, for new topics it matches; the partitions AssignPartition
// gives this subtask are read from the earliest offset. Failures are
// logged and retried at the next interval.
func (s *KafkaSource) discover(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A raw metadata request: kadm's ListTopics answers from franz-go's
	// metadata cache, which can be seconds old.
	resp, err := s.discoverRequest().RequestWith(dctx, s.adminCl)
	if err != nil {
		s.logger.Warn("partition discovery failed; retrying at the next interval", "err", err)
		return
	}
	wanted := s.cfg.startTopics()
	add := map[int32]kgo.Offset{}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		topic := *t.Topic
		if _, ok := wanted[topic]; !ok {
			if s.cfg.TopicPattern == nil || MatchTopics(s.cfg.TopicPattern, []string{topic}) == nil {
				continue
			}
		}
		for _, p := range t.Partitions {
			if p.Partition < 0 || p.Partition > maxPartition {
				continue
			}
			id := s.pid(topic, p.Partition)
			if s.known[id] {
				continue
			}
			s.known[id] = true
			if s.owns(topic, p.Partition) {
				add[id] = kgo.NewOffset().AtStart()
				s.pos[id] = 0
				s.wms.assign(id, noTimestamp, time.Now())
			}
		}
	}
	if len(add) > 0 {
		s.logger.Info("discovered new partitions; reading them from the earliest offset", "partitions", s.tpNames(sortedKeys(add)))
		s.cl.AddConsumePartitions(byTopic(s, add))
	}
}

// lagLabel is the partition label of kstreamd_source_consumer_lag_records: the
// partition number for the source's first topic (a single-topic source's
// labels as they always were), "topic/partition" for the others.
func (s *KafkaSource) lagLabel(topic string, p int32) string {
	if len(s.topicNames) > 0 && s.topicNames[0] == topic {
		return strconv.Itoa(int(p))
	}
	return topic + "/" + strconv.Itoa(int(p))
}
