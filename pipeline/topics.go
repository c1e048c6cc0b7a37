package pipeline

import (
	"fmt"
	"regexp"
	"strings"
)

// sourceTopics checks a source that sets topics or topic_pattern (at p):
// exactly one of topic, topics and topic_pattern, each topic a valid name
// without duplicates, the pattern a valid regular expression, and no
// cluster mode (whose units each read one partition of one topic).
// kafka is false for a source type other than kafka, which takes neither.
func (v *validator) sourceTopics(p string, s *SourceConfig, kafka bool) {
	var set []string
	if s.Topic != "" {
		set = append(set, "topic")
	}
	if s.Topics != nil {
		set = append(set, "topics")
	}
	if s.TopicPattern != "" {
		set = append(set, "topic_pattern")
	}
	last := p + "." + set[len(set)-1]
	switch {
	case !kafka:
		v.errorf(last, "only a source of type kafka reads topics or a topic_pattern")
		return
	case len(set) > 1:
		got := strings.Join(set[:len(set)-1], ", ") + " and " + set[len(set)-1]
		v.errorf(last, "set exactly one of topic, topics and topic_pattern, got %s", got)
		return
	case v.c.Cluster.Enabled:
		v.errorf(last, "not supported in cluster mode (cluster.enabled): a unit reads one topic's partitions; use one source per topic")
		return
	}
	if s.Topics != nil {
		if len(s.Topics) == 0 {
			v.errorf(p+".topics", "must not be empty")
		}
		seen := map[string]int{}
		for i, t := range s.Topics {
			path := fmt.Sprintf("%s.topics[%d]", p, i)
			if j, dup := seen[t]; dup {
				v.errorf(path, "duplicate topic %q (also topics[%d])", t, j)
				continue
			}
			seen[t] = i
			v.topic(path, t)
		}
		return
	}
	if _, err := regexp.Compile(s.TopicPattern); err != nil {
		v.errorf(p+".topic_pattern", "invalid regular expression: %v", err)
	}
}
